"""Behaviours of the simulator as a whole, each stated once and checked over many inputs (issue 30 item 5):

- every cost is monotone in its resource: more HBM bandwidth never slows a memory-bound op, a wider NIC never
  slows an all-to-all, more SMs never slow a DeepEP all-to-all, more rows never lower a grouped GEMM's
  efficiency, more GPUs at a fixed per-GPU plan never change what each GPU computes;
- every mechanism switched off gives the simpler model: no straggler spread, no straggler time; launch
  costs equal across modes, CUDA graphs change nothing; a free host sync, no host-sync time;
- every output's numbers agree with each other: the breakdown sums to the step, tokens/s x step x GPUs is the
  batch, MFU is TFLOPS over the peak, each communication kind's bytes over its busy seconds is its rate.

Small models (``debug``, ``deepseek-v3-16b``) and small plans, so every test runs in well under 3 s.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import comm, ops
from sim.calibration import load_calibration, to_cost_model
from sim.catalog import gpu_names, load_cluster, load_gpu, load_model
from sim.costs import CostModel, default_costs
from sim.errors import ConfigError
from sim.joint import grouped_curve, shipped_values
from sim.predict import Prediction, predict
from sim.specs import ClusterSpec, ParallelPlan
from sim.stacks import builtin_overrides, load_stack
from sim.workload import OpSpec, Workload

FEW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DEBUG = load_model("debug")
MOE16 = load_model("deepseek-v3-16b")
CALIBRATIONS = ("b200-published", "gb200-published", "h100-published", "h800-deepseek-trace")
STACKS = ("torchtitan", "megatron-26.04", "deepseek")


def _plan(n_gpus: int, **kw: object) -> ParallelPlan:
    """A small FSDP + EP plan of ``debug``: two sequences of 512 tokens per GPU, EP 4."""
    base: dict[str, object] = {"ep": 4, "dp_shard": n_gpus, "global_batch": 2 * n_gpus, "seq_len": 512}
    base.update(kw)
    return ParallelPlan(**base)  # type: ignore[arg-type]


def _params(**changed: float) -> dict[str, float]:
    """The shipped joint parameters with some changed (names as in :mod:`sim.joint`)."""
    return {**shipped_values(), **changed}


def _compute_s(p: Prediction) -> float:
    """Compute seconds of one microbatch's chunks, forward and backward (what one GPU computes)."""
    total = 0.0
    for ch in p.trace_data["chunks"]:
        for parts in (ch.f_parts, ch.b_parts):
            total += sum(v for k, v in parts.items() if k.startswith("compute."))
    return total


def _cost_models() -> list[tuple[str, CostModel]]:
    return ([(g, default_costs(load_gpu(g))) for g in gpu_names()]
            + [(c, to_cost_model(load_calibration(c))) for c in CALIBRATIONS])


# --- every cost is monotone in its resource -----------------------------------------------------------------

@FEW
@given(gpu=st.sampled_from(gpu_names()), kind=st.sampled_from(["mem", "quant"]),
       size=st.floats(1.0, 1e11), factor=st.floats(1.0, 8.0), overhead_s=st.sampled_from([0.0, 4e-6]))
def test_more_hbm_bandwidth_never_slows_a_memory_bound_op(gpu: str, kind: str, size: float, factor: float,
                                                          overhead_s: float) -> None:
    base = load_gpu(gpu)
    faster = dataclasses.replace(base, hbm_bw_bytes_per_s=base.hbm_bw_bytes_per_s * factor)
    op = OpSpec("x", kind, nbytes=size) if kind == "mem" else OpSpec("x", kind, elems=size)
    stack = dataclasses.replace(load_stack("torchtitan"), kernel_overhead_s=overhead_s)
    for _, costs in [(gpu, default_costs(base))] + [(c, to_cost_model(load_calibration(c))) for c in CALIBRATIONS]:
        slow, fast = costs.op_seconds(op, base, stack), costs.op_seconds(op, faster, stack)
        assert fast <= slow * (1 + 1e-12), (kind, size, factor)
        if factor >= 1.5:  # the kernel part scales with the bandwidth; the launch overhead does not
            assert fast - overhead_s < (slow - overhead_s) * 0.7


@FEW
@given(backend=st.sampled_from(["nccl", "deepep", "deepep-ll", "hybridep"]),
       phase=st.sampled_from(["dispatch", "combine"]), tokens=st.sampled_from([256, 2048, 8192]),
       factor=st.floats(1.0, 8.0), skew=st.sampled_from([None, 0.8]))
def test_more_nic_bandwidth_never_slows_an_all_to_all(backend: str, phase: str, tokens: int, factor: float,
                                                      skew: float | None) -> None:
    """16 EP ranks over two 8-GPU nodes, so the exchange crosses the NICs."""
    from sim.routing import expert_load

    base = load_cluster("hgx-b200", n_gpus=16)
    wide = dataclasses.replace(base, nic_bw_bytes_per_s=base.nic_bw_bytes_per_s * factor)
    load = None if skew is None or backend == "deepep-ll" else expert_load(f"zipf:{skew}", MOE16.n_routed_experts, 1)

    def time_s(cluster: ClusterSpec) -> float:
        res = comm.moe_alltoall(cluster, list(range(16)), tokens, MOE16, backend, phase, comm.CommCosts.default(),
                                bytes_per_elem=2.0, expert_load=load)
        return float(res.time_s.max())

    assert time_s(wide) <= time_s(base) * (1 + 1e-12)


def test_a_wider_nic_speeds_up_a_flat_all_to_all_between_nodes() -> None:
    """The monotonicity above is not vacuous: NCCL's flat exchange over two nodes is NIC bound."""
    base = load_cluster("hgx-b200", n_gpus=16)
    wide = dataclasses.replace(base, nic_bw_bytes_per_s=base.nic_bw_bytes_per_s * 4)
    t = [comm.moe_alltoall(c, list(range(16)), 4096, MOE16, "nccl", "dispatch", comm.CommCosts.default(),
                           bytes_per_elem=2.0).time_s.max() for c in (base, wide)]
    assert t[1] < 0.5 * t[0]


@FEW
@given(phase=st.sampled_from(["dispatch", "combine"]), tokens=st.sampled_from([512, 4096]),
       n_ranks=st.sampled_from([8, 16]), sms=st.lists(st.integers(1, 148), min_size=2, max_size=6))
def test_more_sms_never_slow_deepep(phase: str, tokens: int, n_ranks: int, sms: list[int]) -> None:
    cluster = load_cluster("hgx-b200", n_gpus=16)
    times = [comm.moe_alltoall(cluster, list(range(n_ranks)), tokens, MOE16, "deepep", phase,
                               comm.CommCosts.default(), bytes_per_elem=2.0, num_sms=s).time_s.max()
             for s in sorted(set(sms))]
    assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(times)), (sorted(set(sms)), times)


def test_deepep_with_few_sms_is_sm_bound() -> None:
    """Not vacuous: with 2 SMs instead of 24 DeepEP is several times slower."""
    cluster = load_cluster("hgx-b200", n_gpus=16)
    t = {s: comm.moe_alltoall(cluster, list(range(16)), 4096, MOE16, "deepep", "dispatch", comm.CommCosts.default(),
                              bytes_per_elem=2.0, num_sms=s).time_s.max() for s in (2, 24)}
    assert t[2] > 3 * t[24]


ROWS = np.geomspace(1.0, 4e6, 300)


@pytest.mark.parametrize(("name", "costs"), _cost_models(), ids=lambda x: x if isinstance(x, str) else "")
def test_more_grouped_gemm_rows_never_lower_its_efficiency(name: str, costs: CostModel) -> None:
    """Every grouped GEMM curve of every GPU's default costs and every shipped calibration, read the way a
    prediction reads it (rows over 0, 8, 32 or 256 local experts): efficiency = FLOPs / (peak x seconds)."""
    peak = 1e15
    for key in costs.grouped_gemm_eff:
        for groups in (0, 8, 32, 256):
            eff = np.array([1e12 / (peak * costs.grouped_gemm_time(1e12, r, peak, key, groups=groups)) for r in ROWS])
            assert np.all(np.diff(eff) >= -1e-12 * eff[1:]), (name, key, groups)
            assert np.all((eff > 0) & (eff <= 1.0)), (name, key, groups)


@FEW
@given(large=st.floats(0.05, 1.0), half_rows=st.floats(16.0, 8192.0))
def test_the_joint_grouped_curve_rises_with_rows(large: float, half_rows: float) -> None:
    curve = grouped_curve(large, half_rows)
    eff = [curve(r) for r in ROWS]
    assert all(b >= a for a, b in itertools.pairwise(eff))


@pytest.mark.parametrize("stack", STACKS)
def test_more_gpus_at_a_fixed_per_gpu_plan_leave_per_gpu_compute_unchanged(stack: str) -> None:
    """8, 16 and 32 GPUs, each with two sequences and EP 4: each GPU computes the same seconds and FLOPs. NCCL
    holds no SMs here: with its channels on SMs, compute beside a longer collective (more ranks) is slowed
    for longer, which test_nccl_channels_slow_the_compute_beside_a_collective checks."""
    costs = dataclasses.replace(default_costs(load_gpu("b200")), comm={"nccl_channels": 0})
    preds = [predict(DEBUG, load_cluster("hgx-b200", n_gpus=n), _plan(n), costs, stack=stack) for n in (8, 16, 32)]
    compute = [_compute_s(p) for p in preds]
    flops_per_gpu = [p.tflops_per_gpu * p.step_time_s for p in preds]
    assert compute[0] > 0
    assert compute == pytest.approx([compute[0]] * 3, rel=1e-12)
    assert flops_per_gpu == pytest.approx([flops_per_gpu[0]] * 3, rel=1e-9)


def test_nccl_channels_slow_the_compute_beside_a_collective() -> None:
    """Every NCCL collective (here the FSDP prefetch beside the forward) holds CommCosts.nccl_channels SMs: more
    of them leave compute fewer SMs, never faster; none leaves compute at its own speed."""
    cluster, plan = load_cluster("hgx-b200", n_gpus=32), _plan(32)
    compute = [_compute_s(predict(DEBUG, cluster, plan, dataclasses.replace(default_costs(load_gpu("b200")),
                                                                           comm={"nccl_channels": sms})))
               for sms in (0, 16, 64)]
    assert compute[0] < compute[1] < compute[2]


# --- every mechanism off equals the simpler model ---------------------------------------------------------------

@pytest.mark.parametrize("n_gpus", [8, 32])
def test_no_straggler_spread_no_straggler_time(n_gpus: int) -> None:
    """A ZeRO-1 stack (Megatron) waits for the slowest data-parallel rank; with a zero spread the term is gone
    and the step is the one with stragglers less exactly their time."""
    cluster, plan = load_cluster("hgx-b200", n_gpus=n_gpus), _plan(n_gpus)
    with_cv = predict(DEBUG, cluster, plan, stack="megatron-26.04")
    without = predict(DEBUG, cluster, plan, stack="megatron-26.04", params=_params(**{"dp.straggler_cv": 0.0}))
    assert with_cv.breakdown.get("straggler", 0.0) > 0
    assert "straggler" not in without.breakdown
    assert without.step_time_s == pytest.approx(with_cv.step_time_s - with_cv.breakdown["straggler"], rel=1e-12)
    assert {k: v for k, v in with_cv.breakdown.items() if k != "straggler"} == pytest.approx(without.breakdown)


def test_stragglers_grow_with_the_spread() -> None:
    cluster, plan = load_cluster("hgx-b200", n_gpus=16), _plan(16)
    s = [predict(DEBUG, cluster, plan, stack="megatron-26.04",
                 params=_params(**{"dp.straggler_cv": cv})).breakdown["straggler"] for cv in (0.02, 0.1, 0.3)]
    assert s[0] < s[1] < s[2]


@pytest.mark.parametrize("stack", STACKS)
def test_full_cuda_graphs_cost_no_more_launch_time_than_none(stack: str) -> None:
    cluster = load_cluster("hgx-b200", n_gpus=8)
    full = predict(DEBUG, cluster, _plan(8, cuda_graphs="full"), stack=stack)
    none = predict(DEBUG, cluster, _plan(8, cuda_graphs="none"), stack=stack)
    assert full.step_time_s <= none.step_time_s * (1 + 1e-12)
    assert _compute_s(full) <= _compute_s(none) * (1 + 1e-12)


def test_partial_cuda_graphs_cost_no_more_than_none_on_a_compiled_stack() -> None:
    cluster = load_cluster("hgx-b200", n_gpus=8)
    steps = {g: predict(DEBUG, cluster, _plan(8, cuda_graphs=g), stack="torchtitan").step_time_s
             for g in ("full", "partial", "none")}
    assert steps["full"] <= steps["partial"] <= steps["none"], steps


def test_each_captured_te_scope_saves_launch_time_and_the_experts_never_replay() -> None:
    """Under partial graphs only the captured scopes' kernels cost a graph node (Megatron-Bridge's presets differ
    per GPU: attention captured on B200, not on B300 or GB200 MXFP8); dropless experts always launch eagerly."""
    cluster = load_cluster("hgx-b200", n_gpus=8)
    steps = {s: predict(DEBUG, cluster, _plan(8, cuda_graphs="partial", cuda_graph_scope=s), stack="megatron-26.04")
             .step_time_s for s in ("moe_router", "attn,moe_router", "attn,moe_router,moe_preprocess")}
    none = predict(DEBUG, cluster, _plan(8, cuda_graphs="none"), stack="megatron-26.04").step_time_s
    assert steps["attn,moe_router,moe_preprocess"] <= steps["attn,moe_router"] < steps["moe_router"] < none, steps
    work = Workload(DEBUG, _plan(8, cuda_graphs="partial", cuda_graph_scope="moe_router"), load_stack("megatron-26.04"))
    layer = work.layer_ops("moe", "fwd") + work.layer_ops("moe", "bwd")
    graphed = {op.name for op in layer if op.graphed}
    assert graphed == {"moe.norm", "moe.router"}, graphed
    assert not any(op.graphed for op in layer if op.kind == "grouped_gemm")


@pytest.mark.parametrize(("fields", "named"), [
    ({"cuda_graph_scope": "attn"}, "cuda_graph_scope ('attn') needs cuda_graphs 'partial'"),
    ({"cuda_graphs": "partial", "cuda_graph_scope": "attn,mlp"}, "cuda_graph_scope"),
])
def test_a_graph_scope_outside_partial_graphs_is_refused(fields: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        ParallelPlan(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("stack", ["torchtitan", "megatron-26.04"])
def test_equal_launch_costs_make_cuda_graphs_irrelevant(stack: str) -> None:
    """With every launch mode at one cost, free host syncs (a full-iteration graph has none) and no host floor
    (graphs issue nothing from the host), the graph scope changes nothing."""
    cluster = load_cluster("hgx-b200", n_gpus=8)
    v = _params(**{"launch.eager_s": 3e-6, "launch.compiled_s": 3e-6, "launch.graphs_s": 3e-6, "host.sync_s": 0.0,
                   "host.eager_op_s": 0.0})
    steps = {g: predict(DEBUG, cluster, _plan(8, cuda_graphs=g), stack=stack, params=v).step_time_s
             for g in ("stack", "none", "partial", "full")}
    assert len(set(steps.values())) == 1, steps
    free = _params(**{"launch.eager_s": 0.0, "launch.compiled_s": 0.0, "launch.graphs_s": 0.0, "host.eager_op_s": 0.0})
    assert predict(DEBUG, cluster, _plan(8), stack=stack, params=free).step_time_s < steps["stack"]


@pytest.mark.parametrize(("backend", "gpu"), [("nccl", "hgx-b200"), ("deepep", "hgx-b200"), ("nccl", "hgx-h100")])
def test_a_free_host_sync_takes_no_time(backend: str, gpu: str) -> None:
    cluster = load_cluster(gpu, n_gpus=16)
    plan = _plan(16, ep_backend=backend)
    base = predict(DEBUG, cluster, plan)
    free = predict(DEBUG, cluster, plan, params=_params(**{"host.sync_s": 0.0}))
    assert base.breakdown.get("host_sync", 0.0) > 0
    assert "host_sync" not in free.breakdown and "host_sync" not in free.hidden_comm
    assert free.step_time_s < base.step_time_s


@pytest.mark.parametrize(("backend", "stack"), [("nccl", "megatron-26.04"), ("hybridep", "megatron-26.04"),
                                              ("deepep", "torchtitan")])
def test_a_full_iteration_graph_never_blocks_the_host(backend: str, stack: str) -> None:
    """Stream capture forbids a synchronising copy: under ``cuda_graphs = "full"`` no dispatch waits on the
    host, whatever the backend; the same plan launched eagerly does."""
    cluster = load_cluster("hgx-b200", n_gpus=16)
    eager = predict(DEBUG, cluster, _plan(16, ep_backend=backend, cuda_graphs="none"), stack=stack)
    graphed = predict(DEBUG, cluster, _plan(16, ep_backend=backend, cuda_graphs="full"), stack=stack)
    assert eager.breakdown.get("host_sync", 0.0) > 0
    assert "host_sync" not in graphed.breakdown and "host_sync" not in graphed.hidden_comm


@pytest.mark.parametrize("stack", ["megatron-26.02", "megatron-26.04"])
@pytest.mark.parametrize("microbatches", [2, 4, 16])
def test_the_step_boundary_costs_its_seconds_once_per_step(stack: str, microbatches: int) -> None:
    """``step.fixed_s`` adds once to an accumulating step, whatever its microbatch count, and shows as
    ``step_fixed``."""
    cluster = load_cluster("hgx-b200", n_gpus=8)
    plan = _plan(8, global_batch=8 * microbatches, micro_batch=1)
    none = predict(DEBUG, cluster, plan, stack=stack, params=_params(**{"step.fixed_s": 0.0}))
    some = predict(DEBUG, cluster, plan, stack=stack, params=_params(**{"step.fixed_s": 0.25}))
    assert some.step_time_s - none.step_time_s == pytest.approx(0.25, rel=1e-9)
    assert some.breakdown["step_fixed"] == pytest.approx(0.25) and "step_fixed" not in none.breakdown


@pytest.mark.parametrize("stack", ["megatron-26.02", "megatron-26.04"])
def test_a_step_of_one_microbatch_pays_no_step_boundary(stack: str) -> None:
    """The boundary was measured only on steps that accumulate gradients (MLPerf v6.0 GPT-OSS-20B's one-microbatch
    steps, 0.09-0.57 s, leave it no room): a step of one microbatch per rank does not pay it, at any size of it."""
    cluster = load_cluster("hgx-b200", n_gpus=8)
    plan = _plan(8, global_batch=8 * 3, micro_batch=3)
    assert plan.n_microbatches == 1
    none = predict(DEBUG, cluster, plan, stack=stack, params=_params(**{"step.fixed_s": 0.0}))
    some = predict(DEBUG, cluster, plan, stack=stack, params=_params(**{"step.fixed_s": 5.0}))
    assert some.step_time_s == pytest.approx(none.step_time_s, rel=1e-12)
    assert "step_fixed" not in some.breakdown


def test_torchtitan_pays_the_joint_step_boundary_on_accumulating_steps_only() -> None:
    """TorchTitan's accumulating steps pay the joint ``step.fixed_s`` as Megatron-Bridge's do
    (``joint_step_boundary``); a step of one microbatch pays none (``StackProfile.step_boundary_s``), which is what
    TorchTitan's public one-node steps are. The ablation's former model (the profile's own 0 s) stays reachable."""
    cluster = load_cluster("hgx-b200", n_gpus=8)
    titan = load_stack("torchtitan")
    assert titan.joint_step_boundary and titan.step_fixed_s == 0.0
    accumulating, single = _plan(8), _plan(8, global_batch=8 * 2, micro_batch=2)
    assert accumulating.n_microbatches == 2 and single.n_microbatches == 1
    a = predict(DEBUG, cluster, accumulating, stack=titan, params=_params(**{"step.fixed_s": 0.0}))
    b = predict(DEBUG, cluster, accumulating, stack=titan, params=_params(**{"step.fixed_s": 2.0}))
    assert b.step_time_s - a.step_time_s == pytest.approx(2.0, rel=1e-9)
    assert b.breakdown["step_fixed"] == pytest.approx(2.0)
    c = predict(DEBUG, cluster, single, stack=titan, params=_params(**{"step.fixed_s": 0.0}))
    d = predict(DEBUG, cluster, single, stack=titan, params=_params(**{"step.fixed_s": 2.0}))
    assert d.step_time_s == pytest.approx(c.step_time_s, rel=1e-12) and "step_fixed" not in d.breakdown
    with builtin_overrides(joint_step_boundary=False):  # the ablation's former model: TorchTitan's own 0 s
        e = predict(DEBUG, cluster, accumulating, stack=load_stack("torchtitan"), params=_params(**{"step.fixed_s": 2.0}))
    assert e.step_time_s == pytest.approx(a.step_time_s, rel=1e-12) and "step_fixed" not in e.breakdown


def test_a_users_own_stack_keeps_its_step_boundary() -> None:
    """The joint value applies to the shipped releases; a changed copy keeps the seconds its file gives."""
    own = dataclasses.replace(load_stack("megatron-26.04"), step_fixed_s=0.5)
    cluster = load_cluster("hgx-b200", n_gpus=8)
    p = predict(DEBUG, cluster, _plan(8), stack=own, params=_params(**{"step.fixed_s": 2.0}))
    assert p.breakdown["step_fixed"] == pytest.approx(0.5)


@pytest.mark.parametrize("sync_s", [0.0, 50e-6, 400e-6, 2e-3])
def test_host_sync_time_follows_its_cost(sync_s: float) -> None:
    """Every blocking sync stalls the GPU for ``host.sync_s``: the exposed host time is a whole number of them."""
    cluster, plan = load_cluster("hgx-b200", n_gpus=8), _plan(8)
    p = predict(DEBUG, cluster, plan, params=_params(**{"host.sync_s": sync_s}))
    host = p.breakdown.get("host_sync", 0.0)
    if sync_s == 0:
        assert host == 0
    else:
        n = host / sync_s
        assert n >= 1 and n == pytest.approx(round(n), abs=1e-6)


# --- every output's numbers agree with each other ---------------------------------------------------------------

consistency_cases = st.tuples(
    st.sampled_from(["debug", "deepseek-v3-16b"]), st.sampled_from(["hgx-b200", "hgx-h100", "gb200-nvl72"]),
    st.sampled_from(STACKS), st.sampled_from([8, 16]), st.sampled_from([1, 2]), st.sampled_from(["nccl", "deepep"]),
    st.sampled_from(["balanced", "zipf:1.0"]), st.sampled_from(["none", "full"]),
)


def _predict_case(case: tuple[str, str, str, int, int, str, str, str]) -> Prediction:
    model, cluster_name, stack, n_gpus, pp, backend, routing, ac = case
    cluster = load_cluster(cluster_name, n_gpus=n_gpus)
    plan = ParallelPlan(pp=pp, ep=4, dp_shard=n_gpus // pp, global_batch=4 * n_gpus // pp, seq_len=1024,
                        ep_backend=backend if cluster.gpu.deepep else "nccl", routing=routing, ac=ac)
    return predict(load_model(model), cluster, plan, stack=stack)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=consistency_cases)
def test_every_output_agrees_with_the_others(case: tuple[str, str, str, int, int, str, str, str]) -> None:
    p = _predict_case(case)
    cluster = load_cluster(case[1], n_gpus=case[3])
    plan = ParallelPlan(**p.plan)
    # the breakdown sums to the step, nothing negative
    assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=1e-9)
    assert all(v >= -1e-12 for v in p.breakdown.values())
    # tokens/s per GPU x step x GPUs = the tokens of one step
    assert p.tokens_per_s_per_gpu * p.step_time_s * p.n_gpus == pytest.approx(plan.tokens_per_step, rel=1e-12)
    # MFU is the achieved TFLOPS over the GPU's dense BF16 peak
    assert p.mfu == pytest.approx(p.tflops_per_gpu * 1e12 / cluster.gpu.bf16_flops, rel=1e-12)
    assert 0 < p.mfu < 1
    # each communication kind: bytes / busy seconds = the achieved rate
    assert p.comm
    for kind, c in p.comm.items():
        assert c["ops_per_step"] > 0 and c["bytes_per_step"] >= 0, kind
        if c["busy_s"] > 0:
            assert c["achieved_gbps"] * 1e9 * c["busy_s"] == pytest.approx(c["bytes_per_step"], rel=1e-9), kind
        else:
            assert c["achieved_gbps"] == 0, kind
    # the bottleneck holds the largest share: no one category, and not all compute together, holds more
    compute = sum(v for k, v in p.breakdown.items() if k.startswith("compute.") or k == "optimizer")
    assert 0 < p.bottleneck_share <= 1
    held = p.bottleneck_share * p.step_time_s * (1 + 1e-9)
    assert compute <= held
    assert all(v <= held for k, v in p.breakdown.items() if not k.startswith("compute."))
    # memory: the total is its parts, and fits says whether it is within the capacity
    assert p.peak_memory_bytes == p.memory["total_bytes"]
    assert p.fits_in_memory == (p.peak_memory_bytes <= p.memory_capacity_bytes)
    assert all(v >= 0 for v in p.hidden_comm.values())


def _parts_sum(memory: Mapping[str, object]) -> float:
    return sum(float(v) for k, v in memory.items()  # type: ignore[arg-type]
               if k in ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "transient_bytes",
                        "reserve_bytes"))


@pytest.mark.parametrize("stack", STACKS)
def test_memory_total_is_the_sum_of_its_parts(stack: str) -> None:
    p = predict(DEBUG, load_cluster("hgx-b200", n_gpus=8), _plan(8), stack=stack)
    assert p.peak_memory_bytes == pytest.approx(_parts_sum(p.memory), rel=1e-12)


def test_an_fp8_lm_head_is_faster_than_the_default_bf16_one() -> None:
    """Megatron's ``fp8_output_proj`` (MXFP8 only) moves the output layer's GEMMs to the FP8 rate; by default the
    head runs in BF16 whatever the linears' recipe (Megatron-Core, TorchTitan's converters, DeepSeek-V3)."""
    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=8)
    plan = ParallelPlan(ep=8, dp_shard=8, global_batch=16, seq_len=2048, precision="mxfp8", ac="none")
    bf16 = predict(model, cluster, plan, stack="megatron-26.04")
    fp8 = predict(model, cluster, dataclasses.replace(plan, fp8_output_proj=True), stack="megatron-26.04")
    assert fp8.breakdown["compute.loss"] < bf16.breakdown["compute.loss"]
    head = Workload(model, plan, load_stack("megatron-26.04")).layer_ops("head", "fwd")
    assert {op.dtype for op in head if op.kind == "gemm"} == {"bf16"}
    with pytest.raises(ConfigError, match="fp8_output_proj needs precision 'mxfp8'"):
        dataclasses.replace(plan, precision="bf16", fp8_output_proj=True)


#: cudnn-frontend sdpa_benchmark_training results/dsv3 (cuDNN 9.22, 2026-04-24): DeepSeek-V3's MLA (128 heads, head
#: dims 192 / 128), batch 2, causal, sequence 4,096: (forward, backward) ms in BF16 and MXFP8.
CUDNN_MLA_4096_MS = {"gb200": {"bf16": (0.977, 3.383), "fp8": (0.714, 2.620)},
                     "gb300": {"bf16": (0.864, 3.127), "fp8": (0.546, 2.348)}}


def _mla_core_ms(gpu_name: str, fp8: bool) -> tuple[float, float]:
    """(forward, backward) ms the cost model gives the cuDNN benchmark's MLA cell on ``gpu_name`` at the tensor rates a
    prediction uses there (the joint calibration's chip factors)."""
    gpu = load_gpu(gpu_name)
    values = shipped_values()
    scale = values["chip.nvl72_rate"] * (values["chip.sm103_clock"] * values["chip.gb300_clock"]
                                         if gpu.arch == "sm103" else 1.0)
    gpu = dataclasses.replace(gpu, bf16_flops=gpu.bf16_flops * scale, fp8_flops=gpu.fp8_flops * scale)
    batch, heads, seq = 2, 128, 4096
    elems = batch * heads * seq * (seq + 1) / 2
    fwd = OpSpec("core", "attn", flops=2 * elems * (192 + 128), elems=elems, dtype="fp8" if fp8 else "bf16")
    bwd = dataclasses.replace(fwd, flops=2 * fwd.flops, backward=True)
    costs, stack = default_costs(gpu), load_stack("megatron-26.04")
    unit = dataclasses.replace(stack, efficiency={"*": {"default": 1.0}}, kernel_overhead_s=0.0)
    return costs.op_seconds(fwd, gpu, unit) * 1e3, costs.op_seconds(bwd, gpu, unit) * 1e3


@pytest.mark.parametrize("gpu", ["gb200", "gb300"])
@pytest.mark.parametrize("fp8", [False, True])
def test_mla_attention_takes_cudnns_measured_time_in_bf16_and_fp8(gpu: str, fp8: bool) -> None:
    """The attention core against cuDNN's own benchmark of DeepSeek-V3's MLA on Blackwell: the GB200 cells set the
    efficiencies (in-sample: within 6%), the GB300 cells check them at Blackwell Ultra's fitted rate and doubled
    exponential rate (within 8%); FP8 attention is 1.3-1.6x BF16 there, not the tensor rate's 2x."""
    got = _mla_core_ms(gpu, fp8)
    want = CUDNN_MLA_4096_MS[gpu]["fp8" if fp8 else "bf16"]
    tol = 0.06 if gpu == "gb200" else 0.08
    assert got[0] == pytest.approx(want[0], rel=tol) and got[1] == pytest.approx(want[1], rel=tol)


#: cudnn-frontend sdpa_benchmark_training results/gpt_oss (cuDNN 9.22): sliding window 128, head dim 64, 128 heads,
#: batch 2, causal, BF16: (forward, backward) ms at sequence 4,096.
CUDNN_WINDOW128_4096_MS = {("gb200", False): (0.210, 0.465), ("gb300", False): (0.202, 0.442),
                           ("gb200", True): (0.210, 2.080), ("gb300", True): (0.175, 1.871)}


@pytest.mark.parametrize("gpu_name", ["gb200", "gb300"])
@pytest.mark.parametrize("fp8", [False, True])
def test_sliding_window_attention_takes_cudnns_time_per_row(gpu_name: str, fp8: bool) -> None:
    """A 128-key window leaves the kernel two key tiles per query tile: cuDNN spends the same time per query row on
    GB200 and GB300, 5-10x its FLOPs' time (MXFP8's backward 4.5x BF16's). The cost model's per-row floor for
    windowed layers gives the cells (GB200 in-sample: 3%; GB300 a check: 8%, MXFP8 21%)."""
    gpu = load_gpu(gpu_name)
    costs = default_costs(gpu)
    batch, heads, seq, window = 2, 128, 4096, 128
    model = dataclasses.replace(load_model("gpt-oss-120b"), full_attention_interval=0)  # every layer windowed
    elems = batch * heads * seq * model.window_keys(seq, (seq + 1) / 2)
    assert model.window_keys(seq, (seq + 1) / 2) == pytest.approx(window * (1 - (window - 1) / (2 * seq)))
    fwd = OpSpec("core", "attn", flops=2 * elems * (64 + 64), elems=elems, rows=batch * heads * seq, window_share=1.0,
                 dtype="fp8" if fp8 else "bf16")
    bwd = dataclasses.replace(fwd, flops=2 * fwd.flops, backward=True)
    unit = dataclasses.replace(load_stack("megatron-26.04"), efficiency={"*": {"default": 1.0}}, kernel_overhead_s=0.0)
    got = (costs.op_seconds(fwd, gpu, unit) * 1e3, costs.op_seconds(bwd, gpu, unit) * 1e3)
    tol = 0.03 if gpu_name == "gb200" else 0.21 if fp8 else 0.08  # GB300's MXFP8 forward: 0.175 ms, 17% under GB200's
    want = CUDNN_WINDOW128_4096_MS[(gpu_name, fp8)]
    assert got[0] == pytest.approx(want[0], rel=tol) and got[1] == pytest.approx(want[1], rel=tol)
    no_floor = dataclasses.replace(costs, attn_window_row_s=(0.0, 0.0), attn_fp8_window_row_s=(0.0, 0.0))
    assert no_floor.op_seconds(fwd, gpu, unit) < 0.5 * costs.op_seconds(fwd, gpu, unit)


def test_only_the_windowed_layers_share_takes_the_floor() -> None:
    """GPT-OSS alternates windowed and full layers: the op that stands for the average layer floors only its windowed
    share, so the full layers' attention is what it was."""
    model = load_model("gpt-oss-120b")
    plan = ParallelPlan(ep=8, dp_shard=8, global_batch=64, seq_len=4096, micro_batch=4, ac="none")
    core = next(op for op in Workload(model, plan, load_stack("megatron-26.04")).layer_ops("moe", "fwd")
                if op.kind == "attn")
    assert 0 < core.window_share < 0.1 and core.rows == pytest.approx(0.5 * 4 * 4096 * model.n_heads)
    gpu = load_gpu("b200")
    costs, unit = default_costs(gpu), load_stack("megatron-26.04")
    full_only = dataclasses.replace(core, flops=core.flops * (1 - core.window_share),
                                    elems=core.elems * (1 - core.window_share), window_share=0.0, rows=0.0)
    floor = core.rows * costs.attn_window_row_s[0] / unit.eff(gpu.arch, "attn.fwd")
    assert costs.op_seconds(core, gpu, unit) == pytest.approx(costs.op_seconds(full_only, gpu, unit) + floor, rel=1e-6)


def test_fp8_attention_on_hopper_speeds_the_forward_only() -> None:
    """cuDNN's per-tensor FP8 attention on an H200 (Llama 3.1 at 4,096, causal): 1.44x the BF16 forward, the backward
    no faster (0.99x); the cost model keeps those ratios on Hopper."""
    gpu = load_gpu("h100")
    costs = default_costs(gpu)
    flops = 1e12
    for backward, speedup in ((False, 0.465 / 0.322), (True, 1.450 / 1.459)):
        bf16 = costs.attention_time(flops, gpu.bf16_flops, backward)
        fp8 = costs.attention_time(flops, gpu.fp8_flops, backward, fp8=True)
        assert bf16 / fp8 == pytest.approx(speedup, rel=0.01)  # the FP8 rate is 2.001x the BF16 one


def test_fp8_attention_adds_its_casts_and_needs_an_fp8_precision() -> None:
    """Transformer Engine's ``fp8_dot_product_attention`` (MLPerf v6.0's ``FP8_DPA``): the casts of Q, K, V (forward)
    and of the output's gradient (backward) are ops of the layer; BF16 and MXFP8-for-experts-only plans refuse it."""
    model, stack = load_model("deepseek-v3-671b"), load_stack("megatron-26.04")
    plan = ParallelPlan(tp=2, pp=4, ep=32, dp_shard=8, global_batch=64, seq_len=4096, precision="mxfp8", ac="none")
    wl = Workload(model, plan, stack)
    fp8_wl = Workload(model, dataclasses.replace(plan, fp8_attention=True), stack)

    def core_ops(w: Workload, phase: str) -> list[OpSpec]:
        return [op for op in w.layer_ops("moe", phase) if op.module == "core_attn"]

    assert len(core_ops(fp8_wl, "fwd")) == len(core_ops(wl, "fwd")) + 1  # the Q, K, V cast
    assert len(core_ops(fp8_wl, "bwd")) == len(core_ops(wl, "bwd")) + 1  # the output gradient's cast
    assert {op.dtype for op in core_ops(fp8_wl, "fwd") if op.kind == "attn"} == {"fp8"}
    for precision in ("bf16", "mxfp8-grouped"):
        with pytest.raises(ConfigError, match="fp8_attention needs an FP8 precision"):
            dataclasses.replace(plan, precision=precision, fp8_attention=True)


def test_fused_grouped_mlp_moves_the_glu_and_the_casts_between_the_expert_gemms_into_their_epilogues() -> None:
    """Transformer Engine's fused grouped MLP (``fused_grouped_mlp``): no SwiGLU kernel and no cast of fc2's input in
    the forward, no cast of fc1's gradient in the backward (fc2's dgrad epilogue writes it), each grouped GEMM and
    cast one launch instead of one per local expert; the expert GEMMs' FLOPs are unchanged and the step is faster.
    Only under MXFP8, and only in a stack that has it."""
    model, stack = load_model("deepseek-v3-671b"), load_stack("megatron-26.04")
    plan = ParallelPlan(tp=1, pp=4, vpp=4, pp_schedule="interleaved-1f1b", ep=32, dp_shard=64, global_batch=256,
                        seq_len=4096, precision="mxfp8", ep_backend="hybridep", ac="none")
    fused_plan = dataclasses.replace(plan, fused_grouped_mlp=True)
    wl, fused = Workload(model, plan, stack), Workload(model, fused_plan, stack)

    def expert_ops(w: Workload, phase: str, kind: str) -> list[OpSpec]:
        return [op for op in w.layer_ops("moe", phase) if op.kind == kind and op.module in ("moe", "moe_act")
                and (op.name in (ops.MOE_QUANTIZE, ops.MOE_EXPERT_GEMM_GATE_UP, ops.MOE_EXPERT_GEMM_DOWN))]

    def moved(w: Workload, phase: str) -> float:
        return sum(op.nbytes for op in expert_ops(w, phase, "mem"))

    assert [op.module for op in expert_ops(wl, "fwd", "mem")].count("moe_act") == 1  # the SwiGLU kernel
    assert [op.module for op in expert_ops(fused, "fwd", "mem")].count("moe_act") == 0
    for phase in ("fwd", "bwd"):
        assert len(expert_ops(fused, phase, "mem")) == len(expert_ops(wl, phase, "mem")) - 2  # GLU and one cast
        assert moved(fused, phase) < moved(wl, phase)
    gemms = [(op.flops, op.launches) for op in expert_ops(wl, "fwd", "grouped_gemm")]
    fused_gemms = [(op.flops, op.launches) for op in expert_ops(fused, "fwd", "grouped_gemm")]
    assert [f for f, _ in fused_gemms] == [f for f, _ in gemms]
    assert {n for _, n in gemms} == {wl.local_experts} and {n for _, n in fused_gemms} == {1}
    cluster = load_cluster("gb200-nvl72", n_gpus=256)
    assert (predict(model, cluster, fused_plan, stack=stack).step_time_s
            < predict(model, cluster, plan, stack=stack).step_time_s)
    with pytest.raises(ConfigError, match="fused_grouped_mlp needs precision 'mxfp8'"):
        dataclasses.replace(plan, precision="bf16", fused_grouped_mlp=True)
    assert "cannot run fused_grouped_mlp True" in (load_stack("torchtitan").refusal(
        ParallelPlan(ep=8, dp_shard=8, precision="mxfp8", fused_grouped_mlp=True)) or "")
    assert load_stack("megatron-26.04").refusal(fused_plan) is None


def test_attention_is_bounded_by_the_softmax_where_the_tensor_rate_outruns_it() -> None:
    """With the matmuls at the FP8 rate the forward of a short-head attention is as slow as its exponentials: the
    core cannot beat ``elems / (exp_per_s x softmax_eff)``, however fast the tensor cores."""
    gpu = load_gpu("b200")
    costs = default_costs(gpu)
    elems = 1e12
    flops = 2 * elems * (64 + 64)  # head dim 64: 256 FLOPs per score
    fp8 = costs.attention_time(flops, gpu.fp8_flops, False, exps=elems, exp_per_s=gpu.exp_per_s, fp8=True)
    assert fp8 == pytest.approx(elems / (gpu.exp_per_s * costs.softmax_eff))
    assert costs.attention_time(flops, gpu.bf16_flops, False, exps=elems, exp_per_s=gpu.exp_per_s) == fp8


@pytest.mark.parametrize(("precision", "per_split"), [("mxfp8", 1), ("fp8-current", 3)])
def test_te_casts_a_grouped_linears_input_expert_by_expert(precision: str, per_split: int) -> None:
    """Transformer Engine's grouped linear quantises its input one expert split at a time (``split_quantize`` ->
    ``multi_tensor_quantize_impl``, fused only under delayed scaling): one kernel per split, three under current
    scaling (amax, scale, cast); a dense linear's cast is one tensor. TorchAO quantises the whole tensor at once."""
    plan = ParallelPlan(ep=8, dp_shard=8, global_batch=16, seq_len=512, precision=precision, ac="none")
    work = Workload(load_model("deepseek-v3-16b"), plan, load_stack("megatron-26.04"))
    fwd = work.layer_ops("moe", "fwd")
    casts = [op for op in fwd if op.name == "moe.quantize"]
    assert casts and {op.launches for op in casts} == {per_split * work.local_experts}
    attn_casts = [op for op in fwd if op.name == "attn.q_proj" and op.kind == "mem"]
    assert attn_casts and {op.launches for op in attn_casts} == {per_split}
    if precision == "mxfp8":
        titan = Workload(load_model("deepseek-v3-16b"), plan, load_stack("torchtitan"))
        assert {op.launches for op in titan.layer_ops("moe", "fwd") if op.name == "moe.quantize"} == {1}


def test_context_parallel_a2a_exchanges_qkv_and_the_output_around_the_core() -> None:
    """Megatron's ``cp_comm_type`` a2a (Ulysses) all-to-alls Q, K, V before the attention core and its output
    after, forward and backward, on the CP group: ``comm.cp`` seconds the p2p ring (under the attention) does not
    pay; each op moves an all-gather's traffic of its bytes over ``cp`` ranks."""
    from sim.predict import simulation_context

    cluster = load_cluster("hgx-b200", n_gpus=8)
    ring = _plan(8, cp=2, dp_shard=4, seq_len=2048, global_batch=8)
    ulysses = dataclasses.replace(ring, cp_comm_type="a2a")
    p_ring, p_uly = predict(DEBUG, cluster, ring), predict(DEBUG, cluster, ulysses)
    assert "comm.cp" not in p_ring.breakdown and p_uly.breakdown["comm.cp"] > 0
    assert p_uly.step_time_s > p_ring.step_time_s
    stack = load_stack("torchtitan")
    ctx = simulation_context(DEBUG, cluster, ulysses, default_costs(cluster.gpu), stack)
    fwd = [op for op in ctx.wl.layer_ops("moe", "fwd") if op.name == ops.CP_ALL_TO_ALL]
    bwd = [op for op in ctx.wl.layer_ops("moe", "bwd") if op.name == ops.CP_ALL_TO_ALL]
    assert len(fwd) == 2 and len(bwd) >= 2
    m, T = DEBUG, ulysses.micro_batch * ulysses.seq_len / ulysses.cp
    if m.attention == "mla":  # every head's K and V, decompressed (the debug model is MLA)
        qk, v, kv = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim, m.n_heads
    else:
        qk, v, kv = m.head_dim, m.head_dim, max(1, m.n_kv_heads)
    assert fwd[0].nbytes == pytest.approx(2 * T * (m.n_heads * qk + kv * (qk + v)))
    assert fwd[1].nbytes == pytest.approx(2 * T * m.n_heads * v)
    assert ctx.op_time(fwd[1], 0).seconds == pytest.approx(ctx.collective("ag", fwd[1].nbytes / 2, "cp"))
    ring_ctx = simulation_context(DEBUG, cluster, ring, default_costs(cluster.gpu), stack)
    assert not [op for op in ring_ctx.wl.layer_ops("moe", "fwd") if op.name == ops.CP_ALL_TO_ALL]
