"""The CPU proxy's fit to UCCL-EP's own benchmark (calibrate.proxy_fit) as a user runs it."""

from __future__ import annotations

import subprocess
import sys

from calibrate.proxy_fit import fit_proxy_normal, report


def test_the_report_gives_the_fit_and_every_point() -> None:
    fit = fit_proxy_normal()
    text = report(fit)
    assert f"{fit.fixed_s * 1e6:.0f} +- {fit.fixed_sigma_s * 1e6:.0f} us" in text
    rows = [line for line in text.splitlines() if line.startswith(("p6-b200", "p5en-h200"))]
    assert len(rows) == 12 and sum("(not fitted)" in r for r in rows) == 6


def test_the_module_runs_as_a_command() -> None:
    out = subprocess.run([sys.executable, "-m", "calibrate.proxy_fit"], capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.startswith("proxy hop per normal kernel:") and not out.stderr
