"""``python -m calibrate profile --smoke``: the GPU profiling recipe, end to end on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


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
