"""``moesim reference ...`` hands every argument to ``python -m reference.run``."""

from __future__ import annotations

import subprocess
import sys


def test_moesim_reference_passes_arguments_through() -> None:
    result = subprocess.run([sys.executable, "-m", "moesim", "reference", "--model", "debug", "--ep", "3",
                             "--dispatch", "all_to_all", "--tokens", "64", "--steps", "1"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "ep (3) must divide the number of routed experts (8)" in result.stderr
    assert "Traceback" not in result.stderr
