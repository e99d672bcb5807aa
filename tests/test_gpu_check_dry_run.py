"""``benchmarks/gpu_check.sh`` (issue 16, Must show 5): ``--dry-run`` rehearses the one-GPU check on the CPU
(prints the GPU run's commands, runs the CPU-capable parts in a temporary folder, writes nothing into the
repository, exits 0); without ``--dry-run`` and without CUDA it exits 2 with one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
#: Where a calibration run could leave files; none may appear.
WATCHED = ("calibrate", "sim/data", "sim/calibrations")
PROVENANCE = ("device", "driver", "torch", "torchao", "date")


def _files() -> set[str]:
    return {str(p.relative_to(ROOT)) for d in WATCHED for p in (ROOT / d).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def _work_folders(tmp: Path) -> list[str]:
    """The script's work folders under ``tmp`` (torch itself leaves a torchinductor folder in TMPDIR)."""
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("moesim-gpu-check"))


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    """This interpreter's environment first on PATH, work folders under ``tmp``."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PYTHON": sys.executable, "PATH": path, "TMPDIR": str(tmp), **extra}


@pytest.mark.slow
def test_dry_run_rehearses_the_gpu_check_on_cpu_without_touching_the_repository(tmp_path: Path) -> None:
    before = _files()
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run"], check=False, cwd=ROOT, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=480)
    wall = time.monotonic() - t0
    out = proc.stdout
    assert proc.returncode == 0, f"rc {proc.returncode} after {wall:.0f} s\n{out[-4000:]}\n{proc.stderr[-3000:]}"
    assert sorted(_files() - before) == []
    assert _work_folders(tmp_path) == [], "the work folder is removed on success"
    # the plan names the GPU run's commands and every provenance field
    assert "moesim calibrate profile --device cuda" in out
    assert "-m 'gpu or multigpu or sm100' tests/reference/test_gpu.py" in out
    assert "nvidia-smi --query-gpu=name,driver_version" in out
    assert "moesim predict --calibration" in out
    for field in PROVENANCE:
        assert f"provenance.{field}" in out.split("== [1/7]")[0], field
    # ... and runs the CPU path: profile, fit, stamp (with values), both load checks
    assert "moesim calibrate profile --device cpu" in out and "--quick" in out
    assert "calibrate fit: wrote" in out
    for field in ("torch", "torchao", "date"):
        line = next(x for x in out.splitlines() if x.strip().startswith(f"provenance.{field} = "))
        assert "null" not in line, line
    assert "moesim predict --calibration: loads (dry-run-cpu-measured" in out
    assert "nothing written into the repository" in out
    assert "gpu_check (dry-run): done in" in out


def test_without_cuda_the_gpu_run_exits_2_with_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(SCRIPT)], check=False, cwd=ROOT, env=_env(tmp_path, CUDA_VISIBLE_DEVICES=""),
                          capture_output=True, text=True, timeout=180)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout == "" and len(lines) == 1, proc.stderr
    assert lines[0].startswith("gpu_check: error: no CUDA device") and "--dry-run" in lines[0]
    assert _work_folders(tmp_path) == []


def test_an_unknown_argument_exits_2_with_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(SCRIPT), "--bogus"], check=False, cwd=ROOT, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    expected = "gpu_check: error: unknown argument '--bogus' (benchmarks/gpu_check.sh --help)"
    assert proc.stderr.strip().splitlines() == [expected]
