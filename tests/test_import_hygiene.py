"""`import sim` must leave torch (and the reference) out of the process."""

import subprocess
import sys


def test_import_sim_does_not_import_torch() -> None:
    code = (
        "import sys, sim, sim.cli, sim.accounting, sim.catalog, sim.loaders;"
        "import importlib.util as u;"
        "[__import__(m) for m in ('sim.predict', 'sim.engine', 'sim.workload', 'sim.comm', 'sim.topology') if u.find_spec(m)];"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'reference', 'calibrate', 'studies')));"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
