"""``python -m calibrate profile --smoke``: the GPU profiling recipe, end to end on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def calibrate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "calibrate", *args], capture_output=True, text=True, timeout=300)


def test_smoke_profile_writes_per_op_times_with_provenance(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    result = calibrate("profile", "--label", "cpu-test", "--out", str(out), "--smoke")
    assert result.returncode == 0, result.stderr
    document = json.loads((out / "calibration-input.json").read_text())
    assert document["device_label"] == "cpu-test"
    runs = {run["case"]: run for run in document["runs"]}
    assert set(runs) == {"debug-fp32-T64", "debug-mxfp8-T64"}
    for run in runs.values():
        assert run["ok"], run
        assert {"moe.router", "moe.expert_gemm", "attn.core"} <= set(run["ops"])
        assert all(op["total_s"] > 0 for op in run["ops"].values())
    assert runs["debug-mxfp8-T64"]["meta"]["backends"]["gemm"]["kernel"] == "torchao-mxfp8-emulated"

    again = calibrate("profile", "--label", "cpu-test", "--out", str(out), "--smoke")
    assert again.returncode == 2 and "exists" in again.stderr and "Traceback" not in again.stderr


def test_microbenchmark_group_runs_and_a_profile_fits(tmp_path: Path) -> None:
    """One quick microbenchmark group for real, then the fit of a small profile document."""
    out = tmp_path / "mem.json"
    result = subprocess.run([sys.executable, "-m", "reference.bench", "mem", "--quick", "--out", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["rows"]
    assert rows and all(r["seconds"] > 0 and r["bytes"] > 0 for r in rows)

    from calibrate.microbench import PROFILE_SCHEMA, fit_profile
    from sim.calibration import load_calibration

    gemm = [{"M": n, "N": n, "K": n, "flops": 2.0 * n ** 3, "seconds": 2.0 * n ** 3 / (5e10 * e)}
            for n, e in ((64, 0.2), (256, 0.7), (1024, 0.95))]
    a2a = [{"world": 2, "bytes_per_rank": b, "seconds": 1e-4 + b / 4e9} for b in (1e3, 1e5, 1e7)]
    profile = {"schema": PROFILE_SCHEMA, "device": "cpu", "cores": 2, "threads_per_rank": 1,
               "groups": {"gemm": gemm, "mem": rows, "a2a": a2a, "deepep": [{"skipped": "not installed"}]},
               "reference_runs": []}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    doc = fit_profile(path, tmp_path / "cpu.json")
    assert doc["device_spec"]["bf16_flops"] == pytest.approx(5e10 * 0.95)
    assert doc["gemm_eff"]["bf16"]["values"] == pytest.approx([0.2 / 0.95, 0.7 / 0.95, 1.0], rel=1e-4)
    row = doc["comm_rates"]["gloo.all_to_all.w2"]
    assert row["bytes_per_s"] == pytest.approx(4e9, rel=1e-3) and row["overhead_s"] == pytest.approx(1e-4, rel=1e-2)
    assert any("deepep: skipped" in n for n in doc["notes"])
    load_calibration(tmp_path / "cpu.json")


@pytest.mark.parametrize("command", ["profile", "run"])
def test_device_cuda_without_cuda_refuses_before_profiling(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           command: str) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: the refusal is for machines without it")
    from tests.robustness.cli import assert_user_error, run_cli

    out = tmp_path / ("prof" if command == "profile" else "cal.json")
    assert_user_error(run_cli(["calibrate", command, "--device", "cuda", "--out", str(out)], capsys),
                      "--device cuda", "CUDA is not available")
    assert list(tmp_path.iterdir()) == []
