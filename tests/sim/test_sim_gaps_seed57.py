"""Gaps the seed-57 mutation sample of sim/ found (docs/mutation.md): one test per surviving mutant that a real
input can observe, each checking the behaviour from its meaning, not the implementation's formula."""

from __future__ import annotations

import dataclasses
import math

import pytest

from sim import ops
from sim.catalog import load_cluster, load_gpu, load_model
from sim.errors import ConfigError, PlanError
from sim.specs import ParallelPlan
from sim.stacks import load_stack
from sim.workload import Workload


def _wl(stack: str = "torchtitan", model: str = "debug", **plan) -> Workload:
    kw = dict(tp=2, ep=4, dp_shard=4, global_batch=8, seq_len=256, precision="mxfp8", ep_backend="nccl")
    return Workload(load_model(model), ParallelPlan(**{**kw, **plan}), load_stack(stack))


def test_every_op_of_a_backward_layer_is_flagged_backward() -> None:
    """(sim.workload _backward) The backward list's collectives (the TP gather/scatter and the all-to-alls,
    swapped for their gradients) are backward ops like the kernels around them; no forward op is."""
    wl = _wl()
    bwd = wl.layer_ops("moe", "bwd")
    comms = [op for op in bwd if op.kind == "comm"]
    assert {op.coll for op in comms} >= {"tp.all_gather", "tp.reduce_scatter", "a2a.dispatch", "a2a.combine"}
    assert all(op.backward is True for op in comms), [(op.name, op.backward) for op in comms]
    assert not any(op.backward for op in wl.layer_ops("moe", "fwd"))


def test_mxfp8_weight_rearrange_of_the_expert_dgrad_is_a_backward_op() -> None:
    """(sim.workload _grouped_backward) With MXFP8 experts and weights quantised per call, the dgrad's
    weight quantisation and its scale rearrange are backward ops (every op of the backward list is)."""
    bwd = _wl(stack="torchtitan", precision="mxfp8").layer_ops("moe", "bwd")
    weight_rearranges = [op for op in bwd if op.kind == "rearrange" and op.layout == "weight"]
    assert weight_rearranges
    assert all(op.backward is True for op in bwd if op.name == ops.MOE_QUANTIZE), \
        [(op.kind, op.layout, op.backward) for op in bwd if op.name == ops.MOE_QUANTIZE]


def test_trace_op_slices_carry_their_phase() -> None:
    """(sim.predict.layers _layer_nodes) Each op slice of an expanded layer carries its phase: ``fwd`` in a
    forward layer, ``bwd`` (or ``recompute``) in a backward one."""
    from sim.predict import predict
    from sim.trace import chrome_trace_events

    pred = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
                   ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512, ac="full"))
    events = chrome_trace_events(pred)
    assert {e["args"]["phase"] for e in events if e.get("cat") == "layer"} == {"fwd", "bwd"}
    op_slices = [e for e in events if e.get("cat") not in ("layer", "pipeline") and e["ph"] == "X"
                 and "layer" in e.get("args", {})]
    assert op_slices
    phases = {e["args"]["phase"] for e in op_slices}
    assert phases == {"fwd", "bwd", "recompute"}, phases


def test_selective_recompute_of_moe_reruns_the_routed_swiglu() -> None:
    """(sim.stacks recomputes) Megatron's ``moe`` recompute module re-runs the whole MoE block, its SwiGLU
    (``moe_act``) and shared experts included."""
    stack = dataclasses.replace(load_stack("megatron"), recompute_modules=("moe",))
    assert stack.recomputes("moe_act") and stack.recomputes("shared_experts") and stack.recomputes("moe")
    assert not stack.recomputes("core_attn")
    wl = Workload(load_model("debug"), ParallelPlan(ep=4, dp_shard=4, global_batch=8, seq_len=256, ac="selective"),
                  stack)
    assert ops.MOE_EXPERT_GEMM_GATE_UP in {op.name for op in wl.layer_ops("moe", "recompute") if op.kind == "mem"}


def test_nccl_count_exchange_sends_one_int64_per_routed_expert() -> None:
    """(sim.workload _moe) Before an NCCL all-to-all the ranks exchange their per-expert token counts: one
    8-byte count per routed expert."""
    wl = _wl(ep_backend="nccl")
    counts = [op for op in wl.layer_ops("moe", "fwd") if op.name == ops.A2A_COUNT_EXCHANGE]
    assert [op.nbytes for op in counts] == [8 * load_model("debug").n_routed_experts]


def test_dualpipev_gradients_between_ranks_pay_the_p2p_send() -> None:
    """(sim.schedule _Deps.done) In DualPipeV a backward sends its gradient to the previous position: from
    stage 1 (rank 1) to stage 0 (rank 0) that crosses ranks, so stage 0's backward starts a p2p send after."""
    from sim.schedule import PipelineSpec, simulate_pipeline

    p2p = 10.0
    res = simulate_pipeline(PipelineSpec("dualpipev", 2, 1, 4, [1.0] * 4, [2.0] * 4, p2p_s=p2p))
    tl = res.timeline
    for mb in range(4):
        assert tl[("B", 0, mb)][1] >= tl[("B", 1, mb)][2] + p2p - 1e-9, mb
        # the V's turn (stage 2 -> stage 1) stays on rank 1: no send
        assert tl[("B", 1, mb)][0] == tl[("B", 2, mb)][0] == 1


def test_pipeline_slices_are_on_the_named_pipeline_thread() -> None:
    """(sim.trace chrome_trace_events) The schedule's chunk slices lie on the thread named for them."""
    from sim.predict import predict
    from sim.trace import chrome_trace_events

    pred = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
                   ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512))
    events = chrome_trace_events(pred)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    pipe = [e for e in events if e.get("cat") == "pipeline"]
    assert pipe
    assert {names[(e["pid"], e["tid"])] for e in pipe} == {"pipeline (schedule actions: chunk, microbatch)"}


def test_a_scenario_measurement_of_1e12_tokens_is_refused() -> None:
    """(sim.scenarios _variant) A measured throughput must lie below 1e12 tokens/s per GPU."""
    from sim.scenarios import scenario_from_mapping

    def doc(measured: float) -> dict:
        return {"scenario": {"model": "debug", "gpus": 8},
                "variant": [{"name": "v", "measured_tokens_per_s_per_gpu": measured}]}

    assert scenario_from_mapping(doc(9.9e11), "s").variants[0].measured_tokens_per_s_per_gpu == 9.9e11
    with pytest.raises(ConfigError, match=r"variant 'v': measured_tokens_per_s_per_gpu must be a positive number, got 1000000000000\.0"):
        scenario_from_mapping(doc(1e12), "s")


def test_ep_not_dividing_names_the_borrowed_tp() -> None:
    """(sim.specs ParallelPlan.check_fits) With etp 1 the experts borrow the TP ranks too: the message shows
    the product ep must divide, tp included."""
    with pytest.raises(PlanError, match=r"ep \(8\) must divide dp_shard \(2\) \* cp \(1\) \* tp \(2\) = 4$"):
        ParallelPlan(tp=2, ep=8, dp_shard=2, global_batch=8, seq_len=256).check_fits(load_model("debug"), 4)


def test_mla_kv_norm_is_recomputed_with_the_layernorm_module() -> None:
    """(sim.workload _attention) MLA's norm of the compressed KV is a layernorm: recomputing the
    ``layernorm`` module re-runs it with the attention and MoE norms."""
    stack = dataclasses.replace(load_stack("megatron"), recompute_modules=("layernorm",))
    wl = Workload(load_model("debug"), ParallelPlan(ep=4, dp_shard=4, global_batch=8, seq_len=256, ac="selective"),
                  stack)
    rec = wl.layer_ops("moe", "recompute")
    names = {op.name for op in rec}
    assert {ops.ATTN_NORM, ops.MOE_NORM, ops.ATTN_KV_PROJ} <= names, names
    assert all(op.kind == "mem" for op in rec)


def test_a_barrier_of_two_ranks_waits() -> None:
    """(sim.comm.barrier barrier_wait_s) Two ranks arriving apart: the first waits for the other, on average
    sigma x E[max of two standard normals] = sigma / sqrt(pi)."""
    from sim.comm.barrier import barrier_wait_s

    assert barrier_wait_s(2, 1e-3) == pytest.approx(1e-3 / math.sqrt(math.pi), rel=1e-4)
    assert barrier_wait_s(1, 1e-3) == 0.0


def test_a_bad_gpu_name_message_says_gpu() -> None:
    """(sim.catalog load_gpu) The message names the kind as the other catalog messages do (lower case)."""
    with pytest.raises(ConfigError, match=r"^gpu must be a catalog name or a file path \(a non-empty string\), got ''"):
        load_gpu("")


def test_a_w_longer_than_its_b_is_refused() -> None:
    """(sim.schedule _check_dual) A zero-bubble split whose weight-gradient part exceeds its backward fails
    with the constraint it breaks."""
    from sim.errors import PlanError
    from sim.schedule import PipelineSpec, simulate_pipeline

    with pytest.raises(PlanError, match=r"^dualpipev: chunk 0's weight-gradient part W \(3\.0\) must lie in 0\.\.B \(2\.0\)$"):
        simulate_pipeline(PipelineSpec("dualpipev", 2, 1, 4, [1.0] * 4, [2.0] * 4, w_s=[3.0] * 4))


def test_extending_a_pair_counts_a_category_missing_from_the_shorter_run_as_zero() -> None:
    """(sim.predict.layers _extend) A category the two-pair run lacks grows from zero: r3 + extra x r3."""
    from sim.predict.layers import SimResult, _extend

    r3 = SimResult(5.0, {"compute.gemm": 3.0}, {"comm.a2a": 2.0}, {"comm.tp": 1.0}, [])
    r2 = SimResult(3.0, {"compute.gemm": 2.0}, {}, {}, [])
    ext = _extend(r3, r2, 2)
    assert ext.compute_s == {"compute.gemm": 5.0}
    assert ext.exposed_s == {"comm.a2a": 6.0}
    assert ext.hidden_s == {"comm.tp": 3.0}
    assert ext.time_s == pytest.approx(11.0)


def test_fp8_blockwise_deepep_sends_the_dispatch_in_fp8_and_the_combine_in_bf16() -> None:
    """(sim.predict.timing Context.a2a) DeepSeek's FP8 recipe dispatches FP8 tokens (with their scales) but
    combines in BF16: against a BF16 plan the dispatch gets cheaper, the combine does not (a stack that
    dispatches FP8, ``StackProfile.fp8_dispatch``)."""
    from sim.costs import default_costs
    from sim.predict.timing import Context
    from sim.stacks import StackProfile

    model, cluster = load_model("debug"), load_cluster("hgx-h100", n_gpus=8)

    def a2a(precision: str, coll: str) -> float:
        plan = ParallelPlan(ep=8, dp_shard=8, global_batch=8, seq_len=4096, precision=precision,
                            ep_backend="deepep")
        ctx = Context(model, cluster, plan, default_costs(cluster.gpu), StackProfile(fp8_dispatch=True))
        return float(ctx.a2a(coll).time_s.max())

    assert a2a("fp8-blockwise", "a2a.dispatch") < 0.9 * a2a("bf16", "a2a.dispatch")
    assert a2a("fp8-blockwise", "a2a.combine") == pytest.approx(a2a("bf16", "a2a.combine"), rel=1e-9)


def test_a_bad_plan_of_a_measured_run_names_the_run() -> None:
    """(sim.measured_runs resolve_run) A run whose plan cannot be built fails naming the run."""
    from sim.measured_runs import MeasuredRun, resolve_run

    run = MeasuredRun(id="r1", model="debug", gpu="h100", gpus=8, cluster="hgx-h100", stack="torchtitan",
                      release="x", measured_tokens_per_s_per_gpu=1.0, source="s", plan={"precision": "fp7"})
    with pytest.raises(ConfigError, match=r"^run 'r1' plan: .*precision must be one of"):
        resolve_run(run)


def test_a_config_json_that_is_not_an_object_is_refused_by_name() -> None:
    """(sim.loaders model_from_hf_config) A config.json holding a list names the model and what it got."""
    from sim.loaders import model_from_hf_config

    with pytest.raises(ConfigError, match=r"model 'm' \(config.json\): expected a JSON object, got list"):
        model_from_hf_config([1, 2], "m")  # type: ignore[arg-type]


def test_a_nan_gpu_bandwidth_is_refused_naming_the_gpu() -> None:
    """(sim.limits check_fields) A non-finite field is refused with its owner and the field named."""
    with pytest.raises(ConfigError, match=r"^gpu 'h100': hbm_bw_bytes_per_s must be a finite number, got nan"):
        dataclasses.replace(load_gpu("h100"), hbm_bw_bytes_per_s=float("nan"))
