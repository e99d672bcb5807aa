"""Multi-token prediction (DeepSeek-V3 report s2.2): parameters, FLOPs, memory and step time of the MTP
modules, the plan field ``mtp_layers`` and the stacks' defaults. Expected values are closed forms from the
published DeepSeek-V3 shapes (HF config.json), not the code's own helpers."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import pytest

from sim.accounting import (
    count_params,
    exact_flops_per_token,
    memory_per_gpu,
    resolve_mtp_layers,
    torchtitan_flops_per_token,
)
from sim.catalog import load_cluster, load_gpu, load_model
from sim.errors import ConfigError
from sim.loaders import plan_from_mapping
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.stacks import load_stack
from sim.workload import Workload

D, V, H, E, K, F, S = 7168, 129280, 128, 256, 8, 2048, 4096


def _dsv3_moe_layer_params() -> int:
    """One DeepSeek-V3 MoE layer from config.json: MLA (q_lora 1536, kv_lora 512, qk 128+64, v 128), two
    norms, 256 routed + 1 shared SwiGLU experts of 2048, the router."""
    q = D * 1536 + 1536 + 1536 * H * 192
    kv = D * (512 + 64) + 512 + 512 * H * (128 + 128)
    o = H * 128 * D
    return q + kv + o + 2 * D + (E + 1) * 3 * D * F + D * E


def test_mtp_params_closed_form() -> None:
    counts = count_params(load_model("deepseek-v3-671b"))
    # one MoE layer + the 2D -> D projection + enorm, hnorm and the shared head's norm
    assert counts.mtp == _dsv3_moe_layer_params() + 2 * D * D + 3 * D
    assert round(counts.total / 1e9) == 671  # the main model is unchanged


def test_mtp_params_match_hf_total() -> None:
    """HF's checkpoint (685B = 671B main + 14B MTP) stores its own copies of the shared embedding and head in
    the MTP layer (model.layers.61.embed_tokens, shared_head.head); moesim does not count them twice."""
    counts = count_params(load_model("deepseek-v3-671b"))
    hf_mtp = counts.mtp + 2 * V * D
    assert abs(hf_mtp / 1e9 - 14) < 0.6
    assert abs((counts.total + hf_mtp) / 685e9 - 1) < 0.002


def test_mtp_flops_closed_form() -> None:
    m = load_model("deepseek-v3-671b")
    attn_proj = 2 * (D * 1536 + 1536 * H * 192 + D * 576 + 512 * H * 256 + H * 128 * D)
    attn_core = 2 * H * (192 + 128) * (S + 1) / 2
    moe = 2 * D * E + K * 6 * D * F + 6 * D * F
    forward = 2 * 2 * D * D + attn_proj + attn_core + moe + 2 * D * V  # projection, block, shared head
    delta = exact_flops_per_token(m, S, 1) - exact_flops_per_token(m, S)
    assert delta == pytest.approx(3 * forward, rel=1e-12)
    assert exact_flops_per_token(m, S, 2) - exact_flops_per_token(m, S) == pytest.approx(6 * forward, rel=1e-12)
    # TorchTitan's 6N formula: the MTP module's active parameters, the head again, one attention term
    active = _dsv3_moe_layer_params() - (E - K) * 3 * D * F + 2 * D * D + 3 * D + V * D
    tt = torchtitan_flops_per_token(m, S, 1) - torchtitan_flops_per_token(m, S)
    assert tt == pytest.approx(6 * active + 6 * H * (192 + 128) * S, rel=1e-12)


def test_stack_defaults() -> None:
    m, plan = load_model("deepseek-v3-671b"), ParallelPlan()
    assert resolve_mtp_layers(m, plan, load_stack("torchtitan")) == 0
    assert resolve_mtp_layers(m, plan) == 0  # default stack: torchtitan
    for name in ("megatron", "megatron-26.02", "deepseek", "torchtitan"):
        assert "mtp" in load_stack(name).sources["trains_mtp"].lower()  # each default carries its source
        stack = dataclasses.replace(load_stack(name), trains_mtp=True)
        assert resolve_mtp_layers(m, plan, stack) == 1
        assert resolve_mtp_layers(m, ParallelPlan(mtp_layers=0), stack) == 0
    assert resolve_mtp_layers(m, ParallelPlan(mtp_layers=2), load_stack("torchtitan")) == 2
    assert resolve_mtp_layers(load_model("qwen3-30b-a3b"), plan, load_stack("megatron")) == 0


@pytest.mark.parametrize("value", [-1, 1.5, math.nan, True, 65])
def test_bad_plan_values(value: object) -> None:
    with pytest.raises(ConfigError, match="mtp_layers"):
        ParallelPlan(mtp_layers=value)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"plan: mtp_layers"):
        plan_from_mapping({"mtp_layers": value})


@pytest.mark.parametrize("value", ["-1", "1.5", "nan", "x"])
def test_bad_cli_values_exit_2(value: str) -> None:
    r = subprocess.run([sys.executable, "-m", "moesim", "predict", f"--mtp-layers={value}"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "--mtp-layers" in r.stderr and value in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_workload_places_mtp_after_the_head() -> None:
    m = load_model("debug")
    plan = ParallelPlan(tp=2, dp_shard=2, global_batch=4, seq_len=64, mtp_layers=2)
    wl = Workload(m, plan)
    assert wl.last_chunk_tail() == ["head"] + ["mtp", "moe", "mtp_head"] * 2
    proj = [op for op in wl.layer_ops("mtp", "fwd") if op.kind == "gemm"]
    assert len(proj) == 1 and proj[0].flops == 2 * wl.tokens * 2 * m.dim * m.dim / 2  # column-split over tp=2
    assert Workload(m, dataclasses.replace(plan, mtp_layers=None)).last_chunk_tail() == ["head"]


def _seed_plan(**kw: object) -> ParallelPlan:
    return ParallelPlan(tp=2, pp=2, pp_schedule="interleaved-1f1b", vpp=2, ep=32, dp_shard=64, seq_len=4096,
                        global_batch=1024, ac="full", **kw)  # type: ignore[arg-type]


def test_memory_on_the_last_stage() -> None:
    m, gpu = load_model("deepseek-v3-671b"), load_gpu("b200")
    stack = load_stack("torchtitan")
    base, with_mtp = memory_per_gpu(m, _seed_plan(), gpu), memory_per_gpu(m, _seed_plan(mtp_layers=1), gpu)
    assert base.pp_rank == with_mtp.pp_rank == 1  # the last stage is the busiest
    # FSDP: master weights of the MTP module and the last stage's embedding copy, sharded over tp * dp_shard
    counts = count_params(m)
    shard = (counts.mtp + counts.embedding) / (2 * 64)
    assert with_mtp.weights_bytes - base.weights_bytes == pytest.approx(shard * stack.master_bytes, rel=1e-9)
    assert with_mtp.optimizer_bytes - base.optimizer_bytes == pytest.approx(shard * stack.moment_bytes, rel=1e-9)
    logits = 1 * S * V * (2 + 4) / 2
    assert with_mtp.activations_bytes - base.activations_bytes > logits


def test_predict_changes_by_the_module_share() -> None:
    m, cluster = load_model("deepseek-v3-671b"), load_cluster("hgx-b200", n_gpus=256)
    p0, p1 = predict(m, cluster, _seed_plan()), predict(m, cluster, _seed_plan(mtp_layers=1))
    assert p0.step_time_s < p1.step_time_s < p0.step_time_s * 1.10
    assert p1.peak_memory_bytes > p0.peak_memory_bytes
    # the last chunk holds 15 of 61 layers; the MTP module adds about one layer's time to one of 4 chunks
    assert (p1.step_time_s / p0.step_time_s - 1) > 0.01
    # work per step grows by the FLOP share: TFLOPS/GPU = FLOPs/token * tokens/s
    ratio = torchtitan_flops_per_token(m, S, 1) / torchtitan_flops_per_token(m, S)
    assert p1.tflops_per_gpu / p0.tflops_per_gpu == pytest.approx(ratio * p0.step_time_s / p1.step_time_s)


def test_a_stack_that_trains_mtp_defaults_to_the_model_s_modules() -> None:
    m, cluster = load_model("deepseek-v3-671b"), load_cluster("hgx-b200", n_gpus=256)
    plan = ParallelPlan(pp=16, ep=8, dp_shard=16, seq_len=4096, global_batch=2048, ac="selective")
    stack = dataclasses.replace(load_stack("megatron"), name="megatron-mtp", trains_mtp=True)
    default = predict(m, cluster, plan, stack=stack)
    off = predict(m, cluster, dataclasses.replace(plan, mtp_layers=0), stack=stack)
    on = predict(m, cluster, dataclasses.replace(plan, mtp_layers=1), stack=stack)
    assert default.step_time_s == on.step_time_s > off.step_time_s
    # the shipped profile trains none by default: a plan without mtp_layers runs as mtp_layers = 0 (compared on a
    # copy, which keeps the file's numbers as `stack` does; sim.joint applies to the profiles as shipped)
    assert load_stack("megatron").trains_mtp is False
    assert off.step_time_s == predict(m, cluster, plan, stack=dataclasses.replace(stack, trains_mtp=False)).step_time_s
