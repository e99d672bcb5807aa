"""The CPU proxy's fit to UCCL-EP's own benchmark (calibrate.proxy_fit) as a user runs it."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from calibrate.proxy_fit import (
    B200_CAMPAIGN_BACKENDS,
    B200_CAMPAIGN_US,
    campaign_kernel_s,
    fit_gin_efa_share,
    fit_proxy_normal,
    logical_rdma_bytes,
    p5_rows,
    report,
)
from sim.comm import CommCosts


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


def test_deepep_v2s_gin_share_on_efa_is_the_fit_to_awss_campaign() -> None:
    fit = fit_gin_efa_share()
    assert CommCosts.default().gin_efa_rdma_fraction == pytest.approx(fit.fraction, abs=0.005)
    assert max(abs(r) for r in fit.residuals) < 0.10 and 0 < fit.sigma < 0.05


@pytest.mark.parametrize("backend", ["uccl-ep", "deepep"])
def test_the_proxy_fit_holds_on_a_second_campaign_and_on_nvshmems_proxy(backend: str) -> None:
    # No fit reads these columns: UCCL-EP measured again on p6-b200 (August 2026), and DeepEP v1 over NVSHMEM's
    # libfabric proxy, priced with the hop fitted to UCCL-EP's README: every kernel within 15% (today 13% at most).
    column = B200_CAMPAIGN_BACKENDS.index(backend)
    for key, times in B200_CAMPAIGN_US.items():
        assert campaign_kernel_s(*key, backend, CommCosts.default()) == pytest.approx(times[column] * 1e-6, rel=0.15)


def test_gin_over_efa_is_slower_than_ibgda_and_needs_no_proxy() -> None:
    from sim.catalog import load_cluster
    from sim.comm.transport import proxy_s, rdma_share

    costs = CommCosts.default()
    efa, ib = load_cluster("p6-b200", n_gpus=32), load_cluster("hgx-b200", n_gpus=32)
    assert rdma_share(efa, costs, "deepep-v2", proxied=False) == costs.gin_efa_rdma_fraction
    assert rdma_share(ib, costs, "deepep-v2", proxied=False) == costs.deepep_rdma_fraction
    assert costs.gin_efa_rdma_fraction < costs.deepep_rdma_fraction
    assert proxy_s(efa, costs, "deepep-v2", internode=True) == 0.0
