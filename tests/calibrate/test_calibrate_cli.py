"""predict --calibration names the calibration and carries intervals; validate-reference's loop (one tiny case)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moesim.cli import main
from sim.uncertainty import interval, loo_coverage, measured_run_pairs
from studies.dataset import MEASURED_RUNS, load_runs


def test_predict_names_the_calibration_and_gives_intervals(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "--model", "deepseek-v3-671b", "--cluster", "h800-deepseek", "--gpus", "256", "--ep", "64", "--pp", "4",
            "--seq-len", "4096", "--global-batch", "4096", "--ep-backend", "deepep"]
    assert main([*args, "--calibration", "h800-deepseek-trace", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["calibration"]["name"] == "h800-deepseek-trace"
    assert out["calibration"]["path"].endswith("h800-deepseek-trace.json") and out["calibration"]["sources"]
    iv = out["predictions"][0]["interval"]
    tps = out["predictions"][0]["tokens_per_s_per_gpu"]
    assert 0 < iv["p10_tokens_per_s_per_gpu"] < iv["p90_tokens_per_s_per_gpu"]
    assert iv["p10_tokens_per_s_per_gpu"] < tps * 1.1 and iv["stack"] == "torchtitan"
    assert main([*args, "--calibration", "h800-deepseek-trace"]) == 0
    text = capsys.readouterr().out
    assert "calibration: h800-deepseek-trace" in text and "p10-p90" in text and "tokens/s/GPU" in text


def test_intervals_widen_with_few_runs_and_loo_covers_the_seed_runs() -> None:
    narrow = interval(100.0, [0.01, -0.01, 0.0, 0.02, -0.02, 0.01], calibration_sd=0.0)
    wide = interval(100.0, [0.01, -0.01], calibration_sd=0.0)
    assert (wide.p90 - wide.p10) > (narrow.p90 - narrow.p10)
    assert interval(100.0, [0.0, 0.0], calibration_sd=0.1).p90 > 110
    pairs, skipped = measured_run_pairs(MEASURED_RUNS)
    assert len(pairs) + len(skipped) == len(load_runs())
    # a run marked fitted (a number fitted to it alone) never enters the validation residuals; the shipped runs
    # all enter the joint calibration instead, and none is marked
    assert sum("fitted" in s for s in skipped) == sum(r.fitted for r in load_runs()) == 0
    cov = loo_coverage(pairs)
    assert cov["runs"] == len(pairs) and 0.0 <= cov["coverage"] <= 1.0
    assert cov["per_stack"]["torchtitan"]["runs"] == 5  # the three seed runs and the two 512-H100 runs


def cpu_calibration(path: Path) -> None:
    """A hand-written calibration of a 'CPU' (the loop's mechanics, not its accuracy, are under test)."""
    doc = {"schema": "moesim.calibration", "version": 2, "name": "cpu-test", "gpu": "cpu-test",
           "provenance": {"method": "test"}, "gemm_eff": {"bf16": {"sizes": [1e6, 1e9], "values": [0.3, 0.9]}},
           "grouped_gemm_eff": {"bf16": {"sizes": [256, 4096], "values": [0.5, 0.9]}},
           "attn_fwd_eff": 0.2, "attn_bwd_eff": 0.2, "mem_bw_eff": 1.0, "launch_overhead_s": 2e-4, "host_sync_s": 0.0,
           "comm_rates": {"gloo.all_to_all.w2": {"overhead_s": 1e-4, "bytes_per_s": 5e9}},
           "device_spec": {"bf16_flops": 5e10, "fp8_flops": 5e10, "hbm_bw_bytes_per_s": 5e9, "arch": "cpu"}}
    path.write_text(json.dumps(doc))


def test_validate_reference_quick_loop_prints_cases_and_mape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    cal = tmp_path / "cpu.json"
    cpu_calibration(cal)
    assert main(["validate-reference", "--calibration", str(cal), "--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in out["cases"]] == ["T192-D256-E8-ep1"]
    case = out["cases"][0]
    assert case["measured_s"] > 0 and case["predicted_s"] > 0
    assert out["mape"] == pytest.approx(abs(case["error"]))


def test_validate_reference_rejects_a_gpu_calibration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate-reference", "--calibration", "h800-deepseek-trace"]) == 2
    assert "not a calibration of this machine" in capsys.readouterr().err
