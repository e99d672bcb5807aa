"""Lower bounds on a plan's predicted step time, for pruning plan searches without predicting.

Three bounds, each never above what :func:`sim.predict.predict` returns (tests/studies/test_plan_search.py
checks them against predictions over generated plans):

- :func:`peak_bound_s` (physics): the busiest GPU does at least the mean share of the model's exact
  training FLOPs (forward, 2x backward, and the recomputed forward under full recompute) at no more than
  the datasheet peak of the fastest precision the plan uses. No efficiency below 1 enters it.
- :func:`pipeline_compute_bound_s` (the simulator's own layer times): per chunk, the time of its layers as
  the simulator's layer level gives them (:func:`studies._sim.layer_sim_seconds`: compute plus the
  communication the layer cannot hide), which is exactly what a plain forward or backward chunk takes in
  the pipeline; for combined 1F1B (``ep_overlap``), whose overlapped pairs may hide communication, only
  the compute in them (a serial compute stream that communication only slows); for DualPipe(V), what each
  rank runs (:func:`sim.schedule.dual_work`): forwards and backwards alone at their chunk times, the
  overlapped pairs at their compute. Summed per pipeline rank, plus the
  pipeline's unavoidable fill and drain: a rank cannot start before microbatch 0's forward has crossed
  the chunks before its first, and (schedules without deferred weight gradients) after its last backward
  the same microbatch's backward must still cross those chunks; plus the step boundary the plan's step pays
  (:func:`studies._sim.step_boundary_seconds`: an accumulating step of the stack). The compute-only times
  (:func:`studies._sim.layer_compute_seconds`) are a cheaper first bound for every schedule.
- :func:`schedule_bound_s` (the simulator's own schedule): the plan's pipeline schedule run on its
  simulated chunks, each overlapped pair at the compute its busiest symmetry class runs (the compute stream
  is serial and communication only slows it), plus the replica all-reduce and the optimizer. A
  fixed-order schedule's makespan only grows with its durations, so it is a bound, and it sees the
  bubbles and pairs the per-rank sum cannot. It costs a schedule run per plan (the layers are shared).

>>> from sim.catalog import load_model, load_cluster
>>> from sim.specs import ParallelPlan
>>> m, c = load_model("debug"), load_cluster("hgx-b200", n_gpus=8)
>>> plan = ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512)
>>> 0 < peak_bound_s(m, c, plan) <= pipeline_compute_bound_s(m, c, plan, "torchtitan")
True
"""

from __future__ import annotations

from collections.abc import Callable

from sim.accounting import exact_flops_per_token
from sim.predict import SimMemo
from sim.schedule import dual_work
from sim.specs import ClusterSpec, ModelSpec, ParallelPlan
from sim.workload import chunk_layers
from studies._sim import (
    layer_compute_seconds,
    layer_sim_seconds,
    step_bound_seconds,
    step_boundary_seconds,
)

__all__ = ["peak_bound_s", "pipeline_compute_bound_s", "chunk_ranks", "layer_times", "compute_only_times",
           "LayerTimes", "rate_bound_tokens_per_s_per_gpu"]

#: layer kind -> (forward s, backward s, forward compute s, backward compute s, forward all-to-all stream s,
#: backward all-to-all stream s) of one microbatch
LayerTimes = dict[str, tuple[float, float, float, float, float, float]]


def layer_times(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str,
                memo: SimMemo | None = None) -> LayerTimes:
    """The layer times the pipeline bound uses: simulated layers where sim exposes them, else compute only
    (``memo``: the search's shared simulations, :mod:`sim.predict.memo`)."""
    return layer_sim_seconds(model, cluster, plan, stack_name, memo=memo)


def schedule_bound_s(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str,
                     memo: SimMemo | None = None) -> float:
    """The tightest bound: the plan's own schedule on its simulated layers, overlapped pairs at their compute
    alone, plus the step tail that does not depend on the timeline (one plan at a time, not per layer key)."""
    return step_bound_seconds(model, cluster, plan, stack_name, memo=memo)


def compute_only_times(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str) -> LayerTimes:
    """Compute-only layer times (cheap: no simulation), valid as a lower bound for every schedule."""
    return {k: (f, b, f, b, 0.0, 0.0) for k, (f, b) in layer_compute_seconds(model, cluster, plan, stack_name).items()}


def peak_bound_s(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> float:
    """Seconds the busiest GPU needs at least for its FLOPs at peak rate (see the module docstring)."""
    passes = 4 if plan.ac == "full" else 3
    fastest = cluster.gpu.bf16_flops if plan.precision == "bf16" else max(cluster.gpu.fp8_flops,
                                                                          cluster.gpu.bf16_flops)
    flops = exact_flops_per_token(model, plan.seq_len) / 3 * passes * plan.tokens_per_step / cluster.n_gpus
    return flops / fastest


def rate_bound_tokens_per_s_per_gpu(model: ModelSpec, plan: ParallelPlan, times: LayerTimes) -> float:
    """Tokens/s per GPU that no plan of ``plan``'s layer shape (the fields a layer's compute reads: TP, CP, EP,
    recompute, micro-batch, precision) exceeds, at any pipeline layout, schedule, data-parallel width or GPU
    count, from its compute-only layer ``times`` (:func:`compute_only_times`).

    Why: :func:`pipeline_compute_bound_s` never exceeds the predicted step, and it is at least the busiest
    pipeline rank's compute, so at least the mean over the ``pp`` ranks, ``m * T / pp`` (``m`` microbatches of
    the rank's data-parallel group, ``T`` one microbatch's compute through every layer, embedding and head;
    DualPipe's two copies run each microbatch through the model once as well). The step's tokens per GPU are
    ``m * micro_batch * seq_len / (tp * cp * pp)``, so tokens/s per GPU <= ``micro_batch * seq_len / (tp * cp * T)``.
    """
    zero = (0.0,) * 6
    n_dense = model.n_dense_layers
    counts = {"embed": 1, "head": 1, "dense": n_dense, "moe": model.n_layers - n_dense}
    per_microbatch = sum(n * (times.get(kind, zero)[0] + times.get(kind, zero)[1]) for kind, n in counts.items())
    return plan.micro_batch * plan.seq_len / (plan.tp * plan.cp * per_microbatch)


def chunk_ranks(plan: ParallelPlan, n_chunks: int) -> list[int] | None:
    """Pipeline rank of each chunk (virtual stage), or None where the layout is not a plain chain
    (DualPipe's two model copies)."""
    pp = plan.pp
    if pp == 1:
        return [0] * n_chunks
    if plan.pp_schedule in ("1f1b", "interleaved-1f1b"):
        return [c % pp for c in range(n_chunks)]
    if plan.pp_schedule == "dualpipev":
        return [c if c < pp else 2 * pp - 1 - c for c in range(n_chunks)]
    return None


_layer_times = layer_times


def pipeline_compute_bound_s(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str,
                             layer_times: LayerTimes | None = None,
                             layer_times_fn: Callable[[], LayerTimes] | None = None) -> float:
    """Seconds the simulator's step takes at least, from compute alone (see the module docstring).

    ``layer_times`` (from :func:`layer_times`) may be passed in to share it between plans that differ only
    in pipeline layout."""
    times = layer_times or (layer_times_fn() if layer_times_fn else
                            _layer_times(model, cluster, plan, stack_name))
    chunks = chunk_layers(model, plan)
    dual = plan.pp_schedule in ("dualpipe", "dualpipev") and plan.pp > 1
    # Overlapped F&B pairs (DualPipe, Megatron's combined 1F1B) may hide communication: compute only.
    fi, bi = (2, 3) if dual or plan.ep_overlap else (0, 1)
    zero = (0.0,) * 6
    dense_t, moe_t = times.get("dense", zero), times.get("moe", zero)
    cols: list[list[float]] = [[] for _ in range(6)]  # per chunk: the six LayerTimes columns
    for ci, layers in enumerate(chunks):
        n_dense = sum(1 for li in layers if li < model.n_dense_layers)
        n_moe = len(layers) - n_dense
        ends = (times["embed"] if ci == 0 else zero, times["head"] if ci == len(chunks) - 1 else zero)
        for i, col in enumerate(cols):
            col.append(n_dense * dense_t[i] + n_moe * moe_t[i] + ends[0][i] + ends[1][i])
    fwd, bwd = cols[fi], cols[bi]
    fwd_alone, bwd_alone, fwd_comm, bwd_comm = cols[0], cols[1], cols[4], cols[5]
    m = plan.n_microbatches
    boundary = step_boundary_seconds(stack_name, plan)  # paid once by an accumulating step of the stack
    if dual:
        return _dual_bound(plan, fwd, bwd, fwd_alone, bwd_alone, fwd_comm, bwd_comm) + boundary
    ranks = chunk_ranks(plan, len(chunks))
    assert ranks is not None  # None only for DualPipe, bounded above
    deferred_w = plan.pp_schedule == "dualpipev"
    best = 0.0
    for r in range(plan.pp):
        mine = [c for c in range(len(chunks)) if ranks[c] == r]
        work = m * sum(fwd[c] + bwd[c] for c in mine)
        first = min(mine)
        start = sum(fwd[:first])
        end = 0.0 if deferred_w else sum(bwd[:first])
        best = max(best, start + work + end)
    return best + boundary


def _dual_bound(plan: ParallelPlan, fwd: list[float], bwd: list[float], fwd_alone: list[float],
                bwd_alone: list[float], fwd_comm: list[float], bwd_comm: list[float]) -> float:
    """DualPipe(V): per rank, what it must run (:func:`sim.schedule.dual_work`): each forward or backward
    alone at its plain chunk time, each overlapped pair at least the busier of its serial compute stream
    (``fwd`` + ``bwd``) and its serial all-to-all stream (whose kernels overlap only slows); after a
    start no earlier than microbatch 0's forward through the chunks before the rank's first (DualPipeV)."""
    best = 0.0
    for r, work in enumerate(dual_work(plan.pp_schedule, plan.pp, plan.n_microbatches)):
        busy = 0.0
        for (phase, f, b), n in work.items():
            if phase == "F":
                busy += n * fwd_alone[f]
            elif phase == "B":
                busy += n * bwd_alone[b]
            else:
                busy += n * max(fwd[f] + bwd[b], fwd_comm[f] + bwd_comm[b])
        start = sum(fwd_alone[:r]) if plan.pp_schedule == "dualpipev" else 0.0
        best = max(best, start + busy)
    return best
