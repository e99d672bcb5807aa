"""The CI guard (tests/conftest.py, MOESIM_CI=1): skips for a missing tool fail, at run time and at collection.

The collection half used a ``pytest_collectreport`` hook that changed the report after it was counted,
so a module skipped by ``importorskip`` still passed CI (exit 0). This runs pytest on two tiny test
trees with the real conftest and checks the exit codes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def _pytest(tmp_path: Path, body: str, ci: bool) -> subprocess.CompletedProcess[str]:
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(CONFTEST, tests / "conftest.py")
    (tests / "test_it.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if k != "MOESIM_CI"}
    if ci:
        env["MOESIM_CI"] = "1"
        env["MOESIM_CI_SKIP_TOOL_CHECK"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


MODULE_SKIP = "import pytest\npytest.importorskip('no_such_tool_xyz')\ndef test_a():\n    pass\n"
RUN_SKIP = "import pytest\ndef test_a():\n    pytest.skip('no tool')\n"
GPU_SKIP = "import pytest\n@pytest.mark.gpu\ndef test_a():\n    pytest.skip('no GPU')\n"


@pytest.mark.parametrize(("body", "ci", "code"), [
    (MODULE_SKIP, True, 2),   # collection error: pytest exits 2 ("interrupted")
    (MODULE_SKIP, False, 5),  # outside CI: nothing ran, pytest says so (5), but no failure
    (RUN_SKIP, True, 1),
    (RUN_SKIP, False, 0),
    (GPU_SKIP, True, 0),      # missing hardware may skip
])
def test_ci_guard(tmp_path: Path, body: str, ci: bool, code: int) -> None:
    result = _pytest(tmp_path, body, ci)
    assert result.returncode == code, result.stdout + result.stderr
