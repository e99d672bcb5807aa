"""GPU checks (markers gpu, multigpu, sm100): skipped cleanly where the hardware is missing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
N_GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
IS_SM100 = N_GPUS > 0 and torch.cuda.get_device_capability(0)[0] == 10

needs_gpu = pytest.mark.skipif(N_GPUS < 1, reason="needs one CUDA GPU (hardware)")
needs_two = pytest.mark.skipif(N_GPUS < 2, reason="needs two CUDA GPUs (hardware)")
needs_sm100 = pytest.mark.skipif(not IS_SM100, reason="needs an SM100 (Blackwell) GPU (hardware)")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float().cpu() - b.float().cpu()).norm() / b.float().cpu().norm())


def _runner(args: list[str], out: Path, timeout: int = 600) -> dict:
    cmd = [sys.executable, "-m", "reference.run", *args, "--profile", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "meta.json").read_text())


@pytest.mark.gpu
@needs_gpu
def test_bf16_layer_on_gpu_close_to_fp32_cpu(debug_spec) -> None:
    from reference.layer import build_layer

    x = torch.randn(2, 64, debug_spec.dim)
    ref = build_layer(debug_spec, precision="fp32", seed=0)(x).detach()
    layer = build_layer(debug_spec, precision="bf16", seed=0, device="cuda")
    out = layer(x.to("cuda", torch.bfloat16)).detach()
    assert _rel(out, ref) < 2e-2


@pytest.mark.gpu
@needs_gpu
def test_runner_one_gpu_records_cuda_events(tmp_path: Path) -> None:
    meta = _runner(["--precision", "bf16", "--tokens", "1024", "--steps", "3"], tmp_path / "p")
    assert meta["device"]["type"] == "cuda" and meta["timing"]["clock"] == "cuda_events"


@pytest.mark.multigpu
@needs_two
def test_runner_two_gpus_nccl_all_to_all(tmp_path: Path) -> None:
    meta = _runner(["--ep", "2", "--dispatch", "all_to_all", "--precision", "bf16", "--tokens", "1024"],
                   tmp_path / "p")
    assert meta["process_group"] == "nccl" and meta["world_size"] == 2


@pytest.mark.multigpu
@needs_two
@pytest.mark.skipif(N_GPUS >= 2 and importlib.util.find_spec("deep_ep") is None, reason="needs a DeepEP build (deep_ep)")
def test_runner_two_gpus_deepep(tmp_path: Path) -> None:
    meta = _runner(["--ep", "2", "--dispatch", "deepep", "--precision", "bf16", "--tokens", "1024"],
                   tmp_path / "p")
    assert meta["backends"]["dispatch"]["backend"] == "deepep" and meta["versions"]["deep_ep"]


@pytest.mark.gpu
@pytest.mark.sm100
@needs_sm100
def test_real_mxfp8_kernels_within_error_bounds() -> None:
    from reference.experts import make_gemm
    from reference.permute import group_layout, permute_rows

    gemm = make_gemm("mxfp8", "cuda")
    assert gemm.kernel == "torchao-mxfp8-sm100" and not gemm.emulated
    gen = torch.Generator().manual_seed(0)
    layout = group_layout(torch.randint(0, 4, (2048,), generator=gen), 4, 32)
    x = permute_rows(torch.randn(2048, 512, generator=gen), layout).cuda()
    w = (torch.randn(4, 256, 512, generator=gen) * 0.02).cuda()
    out = gemm(x.bfloat16(), w.bfloat16(), layout.offs_G.cuda())
    ref = make_gemm("fp32")(x.cpu(), w.cpu(), layout.offs_G)
    assert 0.02 < _rel(out, ref) < 0.045
