"""Gaps the seed-101 mutation sample of sim/ found (docs/mutation.md): one test per surviving mutant that a real
input can observe, each checking the behaviour from its meaning, not the implementation's formula."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from sim import ops
from sim.catalog import load_cluster, load_model
from sim.errors import ConfigError, PlanError
from sim.specs import ParallelPlan
from sim.stacks import load_stack


def _calibration(**tables: object) -> str:
    doc = {"schema": "moesim.calibration", "version": 2, "name": "t", "gpu": "h100",
           "provenance": {"method": "test", "sources": ["x"]}, **tables}
    return json.dumps(doc)


def _layer(kind: str, phase: str):  # type: ignore[no-untyped-def]
    """One simulated layer of the debug model under FSDP2 (dp_shard 8, one pipeline stage)."""
    from sim.costs import default_costs
    from sim.predict.layers import simulate_layer
    from sim.predict.timing import Context

    cluster = load_cluster("hgx-b200", n_gpus=8)
    plan = ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512)
    ctx = Context(load_model("debug"), cluster, plan, default_costs(cluster.gpu), load_stack("torchtitan"))
    assert ctx.fsdp_per_layer
    return simulate_layer(ctx, kind, phase)


def test_saved_components_without_a_stack_use_the_default_profile() -> None:
    """(sim.accounting saved_components) With no stack given, selective recompute keeps what the default
    profile (TorchTitan's) keeps; it must not fail for want of a profile."""
    from sim.accounting import activation_ledger, saved_components
    from sim.stacks import default_stack

    model = load_model("debug")
    plan = ParallelPlan(ep=4, dp_shard=4, global_batch=8, seq_len=256, ac="selective")
    ledger = activation_ledger(model, True, plan, default_stack())
    kept = saved_components(ledger, "selective")
    assert kept == saved_components(ledger, "selective", default_stack())
    assert set(kept) <= set(ledger)


def test_a_value_whose_repr_is_exactly_60_characters_is_shown_whole() -> None:
    """(sim.calibration _short) Error messages quote a bad value whole up to 60 characters of repr; only a
    longer one is cut to 57 characters and an ellipsis."""
    from sim.calibration import parse_calibration

    sixty = "x" * 58  # repr adds the two quotes: 60 characters
    with pytest.raises(ConfigError) as err:
        parse_calibration(_calibration(notes=sixty), "cal.json")
    assert repr(sixty) in str(err.value)
    assert "..." not in str(err.value)
    longer = "x" * 59
    with pytest.raises(ConfigError) as err:
        parse_calibration(_calibration(notes=longer), "cal.json")
    assert repr(longer)[:57] + "..." in str(err.value)


def test_a_bad_curve_value_names_the_calibration_file() -> None:
    """(sim.calibration _curve) An efficiency above 1.5 in a fitted curve is refused, and the message
    starts with the file it came from, as every other calibration error does."""
    from sim.calibration import parse_calibration

    text = _calibration(gemm_eff={"bf16": {"sizes": [1e9, 1e12], "values": [0.5, 2.0]}})
    with pytest.raises(ConfigError) as err:
        parse_calibration(text, "my-cal.json")
    assert str(err.value).startswith("my-cal.json: gemm_eff.bf16.values[1]"), str(err.value)


def test_an_unknown_sm_sharing_key_is_refused() -> None:
    """(sim.calibration _validate_tables) ``sm_sharing`` takes comm_sms, fitted_slowdown, model_slowdown and
    samples only: a misspelt key is an error naming it, not silently kept."""
    from sim.calibration import parse_calibration

    ok = parse_calibration(_calibration(sm_sharing={"comm_sms": 24, "fitted_slowdown": 0.1}), "cal.json")
    assert ok.tables["sm_sharing"] == {"comm_sms": 24.0, "fitted_slowdown": 0.1}
    with pytest.raises(ConfigError, match=r"sm_sharing: unknown key 'comm_sm'"):
        parse_calibration(_calibration(sm_sharing={"comm_sm": 24}), "cal.json")


def test_megatron_flops_of_a_two_expert_moe_count_the_routed_top_k() -> None:
    """(sim.flops megatron_flops_per_token) Megatron-Bridge counts a MoE layer's MLP as top_k routed experts
    of moe_ffn_hidden_size (plus the shared ones) whatever the number of experts; only a model with at
    most one routed expert is dense. Two experts are a MoE: the count does not depend on the expert count,
    and each extra routed expert per token adds 3 (fwd + 2 bwd GEMMs) x 2 (FLOPs per multiply-add) x 3
    (gate, up, down matrices) x dim x moe_inter_dim per MoE layer."""
    from sim.flops import megatron_flops_per_token

    base = dataclasses.replace(load_model("debug"), n_group=1, topk_group=1)
    two = dataclasses.replace(base, n_routed_experts=2, top_k=2)
    eight = dataclasses.replace(base, n_routed_experts=8, top_k=2)
    assert megatron_flops_per_token(two, 256) == pytest.approx(megatron_flops_per_token(eight, 256), rel=1e-12)
    one_of_two = dataclasses.replace(two, top_k=1)
    n_moe_layers = base.n_layers - base.n_dense_layers
    per_routed_expert = 3 * 2 * 3 * base.dim * base.moe_inter_dim * n_moe_layers
    assert megatron_flops_per_token(two, 256) - megatron_flops_per_token(one_of_two, 256) == \
        pytest.approx(per_routed_expert, rel=1e-12)


@pytest.mark.parametrize("bad", ["2.0", "0", "-0.5"])
def test_an_efficiency_out_of_range_in_a_stack_file_is_refused(tmp_path, bad: str) -> None:
    """(sim.stacks _efficiency) A stack file's efficiencies must lie in (0, 1.5]: 2.0 or 0 is refused as the
    file's own error, naming the file, the field and the value, before the file is merged with its base (the
    message does not blame the built-in profile the file starts from)."""
    path = tmp_path / "s.toml"
    path.write_text(f'[stack]\nbase = "megatron"\n[efficiency.sm100]\ngrouped_gemm = {bad}\n')
    with pytest.raises(ConfigError) as err:
        load_stack(str(path))
    assert str(err.value) == f"stack file {path}: efficiency.sm100.grouped_gemm must be a number in (0, 1.5], got {bad}"
    assert load_stack("megatron").name not in str(err.value)
    path.write_text('[stack]\nbase = "megatron"\n[efficiency.sm100]\ngrouped_gemm = 1.5\n')
    assert load_stack(str(path)).efficiency["sm100"]["grouped_gemm"] == 1.5


def test_a_malformed_interval_file_is_named(tmp_path) -> None:
    """(sim.interval_data load) A file that is not JSON is refused with its path in the message."""
    from sim import interval_data

    bad = tmp_path / "intervals-broken.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="malformed JSON") as err:
        interval_data.load(bad)
    assert str(bad) in str(err.value)
    assert "None" not in str(err.value)


def test_more_virtual_stages_than_layers_are_refused() -> None:
    """(sim.specs ParallelPlan.check_fits) Each of the pp x vpp virtual stages needs at least one layer: 2 x 4
    stages cannot hold the debug model's 4 layers; 2 x 2 can."""
    model = load_model("debug")
    assert model.n_layers == 4
    kw = dict(dp_shard=4, ep=4, pp=2, pp_schedule="interleaved-1f1b", global_batch=32, seq_len=256)
    ParallelPlan(vpp=2, **kw).check_fits(model, 8)
    with pytest.raises(PlanError, match=r"pp \(2\) \* vpp \(4\) = 8 stages exceed the model's 4 layers"):
        ParallelPlan(vpp=4, **kw).check_fits(model, 8)


def test_a_dense_layer_prefetches_its_weights_under_fsdp2() -> None:
    """(sim.predict.layers _fsdp_tasks) FSDP2 all-gathers every transformer block's weights, dense blocks as
    well as MoE ones: a dense layer's forward runs an FSDP all-gather on its own stream."""
    for kind in ("dense", "moe"):
        res = _layer(kind, "fwd")
        assert [(name, stream) for name, stream, *_ in res.log if stream.startswith("fsdp")] == \
            [(ops.FSDP_ALL_GATHER, "fsdp_ag")], kind
        assert res.hidden_s.get("comm.fsdp", 0.0) + res.exposed_s.get("comm.fsdp", 0.0) > 0, kind


def test_fsdp_collectives_are_named_and_counted_as_fsdp_communication() -> None:
    """(sim.predict.layers _fsdp_tasks) A backward layer's FSDP tasks are the weight all-gather and the
    gradient reduce-scatter by name, and their time is FSDP communication, none of it ``comm.other``."""
    res = _layer("moe", "bwd")
    fsdp = [(name, stream) for name, stream, *_ in res.log if stream.startswith("fsdp")]
    assert sorted(fsdp) == sorted([(ops.FSDP_ALL_GATHER, "fsdp_ag"), (ops.FSDP_REDUCE_SCATTER, "fsdp_rs")])
    assert res.hidden_s.get("comm.fsdp", 0.0) + res.exposed_s.get("comm.fsdp", 0.0) > 0
    assert "comm.other" not in res.hidden_s and "comm.other" not in res.exposed_s


def test_deepep_normal_dispatch_forwards_off_rail_rdma_over_nvlink() -> None:
    """(sim.comm.deepep deepep_alltoall) DeepEP's normal kernels route RDMA with PXN: a GPU whose remote peer
    sits on another rail hands its bytes over NVLink to the local GPU on that rail, whose NIC sends them.
    EP over 12 GPUs of two H100 nodes (8 + 4): the remote peers are local GPUs 0-3 of node 1, so GPUs 4-7
    of node 0 use no NIC at all, and GPUs 0-3 carry their traffic too."""
    from sim.comm import CommCosts
    from sim.comm.alltoall import moe_alltoall

    model = dataclasses.replace(load_model("debug"), n_routed_experts=24, n_group=1, topk_group=1)
    cluster = load_cluster("hgx-h100", n_gpus=16)
    res = moe_alltoall(cluster, list(range(12)), 512, model, "deepep", "dispatch", CommCosts.default(),
                       bytes_per_elem=2)
    nic = np.asarray(res.nic_bytes)
    assert np.all(res.rdma_bytes[4:8] > 0)  # they do send across nodes ...
    assert np.all(nic[4:8] == 0), nic  # ... but not through their own NICs
    assert np.all(nic[:4] > res.rdma_bytes[:4]), (nic, res.rdma_bytes)  # the rail GPUs carry the relayed bytes


# --- the rest of the seed-101 sample's sim survivors (triaged after the sample was measured) -------------


def test_a_dtype_without_its_own_gemm_curve_runs_at_the_fp8_curve() -> None:
    """(sim.costs _fallback) fp8-current has no GEMM curve of its own: it runs at FP8's, not at the curve
    first by name (bf16 sorts first)."""
    from sim.catalog import load_gpu
    from sim.costs import Curve, default_costs

    costs = default_costs(load_gpu("h100"))
    costs = dataclasses.replace(costs, gemm_eff={"bf16": Curve((1e9, 1e12), (0.2, 0.2)),
                                                 "fp8": Curve((1e9, 1e12), (0.8, 0.8))})
    assert costs.gemm_time(1e12, 1e15, "fp8-current") == costs.gemm_time(1e12, 1e15, "fp8")
    assert costs.gemm_time(1e12, 1e15, "fp8-current") < costs.gemm_time(1e12, 1e15, "bf16")


def test_a_nan_nic_bandwidth_is_refused_naming_the_cluster() -> None:
    """(sim.specs ClusterSpec) a NaN NIC rate would pass a plain sign check: the bounds refuse it by name."""
    cluster = load_cluster("hgx-b200", n_gpus=16)
    with pytest.raises(ConfigError, match="nic_bw_bytes_per_s"):
        dataclasses.replace(cluster, nic_bw_bytes_per_s=float("nan"))


def test_the_activation_cast_of_a_tp_replicated_projection_counts_as_replicated_work() -> None:
    """(sim.workload _linear) MLA's down-projections run on every TP rank: their FP8 activation casts,
    like their GEMMs, carry the 1/tp useful share."""
    from sim.workload import Workload

    plan = ParallelPlan(tp=2, dp_shard=4, ep=8, precision="fp8-current", seq_len=1024, global_batch=8)
    wl = Workload(load_model("deepseek-v3-671b"), plan, load_stack("torchtitan"))
    q = [o for o in wl.layer_ops("moe", "fwd") if o.name == ops.ATTN_Q_PROJ]
    # the replicated down-projection first: its activation cast, its weight cast, its GEMM
    assert [(o.kind, o.useful_frac) for o in q[:3]] == [("quant", 0.5), ("quant", 0.5), ("gemm", 0.5)]
    assert all(o.useful_frac == 1.0 for o in q[3:])  # the up-projection is split over TP, not replicated


def test_literal_round_robin_routing_dispatches_round_robin_under_every_stack() -> None:
    """(sim.predict.timing Context) --routing round-robin is TorchTitan's literal round robin whatever the
    stack: the dispatch is timed with tokens spread round robin, not as random top-k."""
    from sim.costs import default_costs
    from sim.predict.timing import Context

    cluster = load_cluster("hgx-b200", n_gpus=16)
    for stack, routing, want in (("megatron", "round-robin", "round-robin"), ("megatron", "balanced", "random"),
                                 ("torchtitan", "balanced", "round-robin")):
        plan = ParallelPlan(ep=16, dp_shard=16, seq_len=1024, global_batch=16, routing=routing)
        ctx = Context(load_model("deepseek-v3-16b"), cluster, plan, default_costs(cluster.gpu), load_stack(stack))
        assert ctx.a2a_routing == want, (stack, routing)


def test_a_memo_shared_across_stacks_never_answers_for_another_stack() -> None:
    """(sim.predict.timing Context / memo scope) the same plan predicted under two stacks through one memo
    gives each stack's own prediction."""
    from sim.predict import SimMemo, predict

    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    plan = ParallelPlan(ep=8, dp_shard=16, seq_len=1024, global_batch=32, ep_backend="deepep")
    alone = {s: predict(model, cluster, plan, stack=s).step_time_s for s in ("torchtitan", "megatron")}
    assert alone["torchtitan"] != alone["megatron"]
    memo = SimMemo()
    shared = {s: predict(model, cluster, plan, stack=s, memo=memo).step_time_s for s in ("torchtitan", "megatron")}
    assert shared == alone


def test_an_op_asked_without_overlap_is_timed_standalone() -> None:
    """(sim.predict.timing Context.op_time) by default an op runs alone: a DeepEP dispatch is not given the
    slowdown of running under another chunk's compute."""
    from sim.costs import default_costs
    from sim.predict.timing import Context, is_a2a

    cluster = load_cluster("hgx-b200", n_gpus=16)
    plan = ParallelPlan(ep=16, dp_shard=16, seq_len=1024, global_batch=16, ep_backend="deepep")
    ctx = Context(load_model("deepseek-v3-16b"), cluster, plan, default_costs(cluster.gpu), load_stack("torchtitan"))
    op = next(o for o in ctx.wl.layer_ops("moe", "fwd") if is_a2a(o))
    assert ctx.op_time(op, 0) == ctx.op_time(op, 0, False)
    assert ctx.op_time(op, 0, True).seconds > ctx.op_time(op, 0, False).seconds
