"""Fitting recovers known parameters from synthetic traces (chosen curves, rates, slowdown, plus noise)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibrate.fit import (
    Sample,
    fit_curve,
    fit_sm_sharing,
    fit_tables,
    samples_from_ours,
)
from calibrate.synthetic import TRUE_COMM_BPS, TRUE_GEMM, TRUE_GROUPED, synthetic_trace
from moesim.cli import main
from sim.calibration import load_calibration, to_cost_model
from sim.specs import GPUSpec

GPU = GPUSpec("synthetic", bf16_flops=1e15, fp8_flops=2e15, hbm_bytes=80e9, hbm_bw_bytes_per_s=3e12, num_sms=132,
              nvlink_bw_bytes_per_s=450e9, arch="sm90")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_efficiency_curves_and_comm_rate_are_recovered_within_noise(seed: int) -> None:
    samples = samples_from_ours(synthetic_trace(seed=seed, noise=0.03, repeats=8))
    tables = fit_tables(samples, GPU)
    dense = tables["gemm_eff"]["bf16"]
    assert len(dense["sizes"]) == len(TRUE_GEMM)
    for (size, eff), s, v in zip(TRUE_GEMM, dense["sizes"], dense["values"]):
        assert s == pytest.approx(size, rel=1e-6)
        assert v == pytest.approx(eff, rel=0.04)  # 3% log-normal noise, median of 8
    grouped = tables["grouped_gemm_eff"]["bf16"]
    for (rows, eff), v in zip(TRUE_GROUPED, grouped["values"]):
        assert v == pytest.approx(eff, rel=0.04)
    assert tables["comm_rates"]["a2a.dispatch"]["bytes_per_s"] == pytest.approx(TRUE_COMM_BPS, rel=0.04)
    assert tables["residuals"]["gemm_eff.bf16"]["median_abs_rel"] < 0.05


def test_a_wrong_curve_would_show_in_the_residuals() -> None:
    samples = samples_from_ours(synthetic_trace(seed=0, noise=0.0))
    curve, stats = fit_curve([s for s in samples if s.kind == "gemm"], peak=1e15, num_sms=132)
    assert stats["median_abs_rel"] < 1e-9
    _, off = fit_curve([s for s in samples if s.kind == "gemm"], peak=2e15, num_sms=132)
    assert curve["values"][0] == pytest.approx(TRUE_GEMM[0][1], rel=1e-9)
    assert off["median_abs_rel"] < 1e-9  # a wrong peak scales every efficiency, not the residuals ...
    samples2 = [Sample("attn.o_proj", "fwd", "gemm", "bf16", 1e10, 1e10, t) for t in (1e-5, 2e-5, 4e-5)]
    assert fit_curve(samples2, peak=1e15)[1]["p90_rel"] > 0.5  # ... but scatter does


@pytest.mark.parametrize("slowdown", [0.0, 0.15, 0.4])
def test_the_sm_sharing_slowdown_is_recovered(slowdown: float) -> None:
    samples = samples_from_ours(synthetic_trace(seed=3, noise=0.01, repeats=10, slowdown=slowdown))
    # fitted on the engine-corrected times the extra slowdown is what remains
    fitted = fit_sm_sharing([s for s in samples if s.kind == "gemm"])["fitted_slowdown"]
    model = 20 / 112  # the engine's own share: held / (N - held)
    assert fitted == pytest.approx((1 + model) * (1 + slowdown) - 1, abs=0.03)


def test_fit_cli_writes_a_loadable_calibration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "synthetic.json"
    trace.write_text(json.dumps({"traceEvents": synthetic_trace(seed=5)}))
    out = tmp_path / "cal.json"
    assert main(["calibrate", "fit", str(trace), "--out", str(out), "--gpu", "h800"]) == 0
    cal = load_calibration(out)
    assert cal.provenance["sources"][0].startswith("synthetic.json (sha256 ")
    costs = to_cost_model(cal)
    assert costs.gemm_eff["bf16"](1e12) > 0
    assert main(["calibrate", "show", str(out)]) == 0
    assert "gemm_eff.bf16" in capsys.readouterr().out
