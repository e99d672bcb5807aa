"""The CPU proxy's fit to UCCL-EP's own benchmark (calibrate.proxy_fit) as a user runs it."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from calibrate.proxy_fit import fit_proxy_normal, logical_rdma_bytes, p5_rows, report


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


def test_p5_rows_put_the_model_in_the_benchmarks_units() -> None:
    rows = p5_rows()
    assert len(rows) == 8
    # DeepEP's test's logical bytes: at 4 nodes a token of top-8 over 256 experts reaches 4 x (1 - C(192,8)/C(256,8))
    assert logical_rdma_bytes(32, 256) == pytest.approx(4096 * 4 * (1 - math.comb(192, 8) / math.comb(256, 8)) * 7168 * 2)
    assert all(model > 0 and measured > 0 for *_, measured, model in rows)


@pytest.mark.xfail(strict=True, reason="p5's EP kernels (AWS ep-backend-comparison: 27-46 GB/s logical) run 27-130% "
                                       "slower than the p6-b200-fitted proxy model gives (58-62 GB/s); not fitted "
                                       "(issue 27)")
def test_p5_kernels_within_20_percent_of_aws_benchmark() -> None:
    for *_, measured, model in p5_rows():
        assert model == pytest.approx(measured, rel=0.20)
