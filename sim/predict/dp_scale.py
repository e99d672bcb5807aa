"""Data-parallel work at scale: what a step does once, whatever its microbatch count, and what grows with the
number of data-parallel ranks.

Four mechanisms, each from its source (``../shared/data/published.md`` s8 unless said otherwise):

1. **Distributed-optimizer buckets** (Megatron-Core ``DistributedDataParallel`` with ``overlap_grad_reduce``
   and ``overlap_param_gather``, ZeRO-1 stacks only). Each model chunk's dense and expert parameters sit in
   two buffers; the first chunk of the first pipeline rank is cut into buckets of
   ``max(40M, 1M x dp)`` parameters, every other chunk (later pipeline ranks, later virtual chunks) is one
   bucket per buffer. Gradients are ready only on the last microbatch: a bucket's reduce-scatter starts when
   its layers' last backward is done (:attr:`sim.schedule.PipelineResult.timeline`), the buckets of one rank
   reduce one after another, and what the backward still to run on that rank (the drain) cannot cover is
   exposed after the pipeline. Dense gradients reduce over the data-parallel group (``dp``), expert gradients
   over the expert-data-parallel group (``edp``: gpus / (pp x ep x etp)), as
   :meth:`sim.predict.timing.Context.fsdp_time` sizes them. The parameter all-gather after the update runs
   under the next step's first forward one bucket ahead, as Megatron-Core's forward pre-hooks issue it
   (``_ParamAndGradBucketGroup.finish_param_sync``: wait for this bucket's gather, then dispatch the next
   one's): the first bucket's gather is waited for whole, and each later bucket's only as far as the
   forward of the layers before it does not cover it (:func:`param_gather_exposed_s`). Where gathering a
   bucket takes longer than computing one (few tokens a rank, many parameters a rank, gathers over the
   scale-out network) the first forward runs at the gathers' pace.
2. **NCCL ring latency** at 1,000+ ranks is in :mod:`sim.comm.collectives` (``base + (nsteps - nInter) x
   intra + nInter x inter``); every collective here goes through it.
3. **Once-per-step reductions**: the gradient-norm all-reduce over every rank, the loss all-reduce over the
   data-parallel group and the expert-bias all-reduce (one fp32 per routed expert per MoE layer: ~59 KB for
   DeepSeek-V3): small, latency-bound, NCCL's tree (:func:`sim.comm.collectives.allreduce_tree_time`).
4. **Stragglers**: the step ends when the slowest data-parallel rank is done. Each microbatch's time on a
   rank varies with coefficient of variation ``CommCosts.straggler_cv``; a rank's total over ``m``
   microbatches then spreads by ``cv / sqrt(m)`` and the step waits ``E[max of N normals]`` of those spreads
   (:func:`sim.comm.barrier.barrier_wait_s`): more ranks and fewer microbatches lose more. Applied where data
   parallelism meets once per step (ZeRO-1 / DDP); FSDP's per-layer gathers synchronise ranks every layer,
   a regime this closed form does not describe, so FSDP stacks get none.

Pipeline fill and drain are the schedule's own (:mod:`sim.schedule`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sim.comm.barrier import barrier_wait_s
from sim.comm.collectives import allreduce_tree_time
from sim.predict.timing import BF16, FP32, Context
from sim.schedule import PipelineResult

__all__ = ["DpScale", "bucket_params", "dp_floor_s", "dp_scale", "first_bucket_ag_s", "first_forward_layer_s", "grad_reduce_exposed_s",
           "once_per_step_s", "param_gather_exposed_s", "straggler_s"]

#: Megatron-Core's DDP bucket: at least 40M parameters, 1M per data-parallel rank above 40 ranks.
BUCKET_MIN_PARAMS = 40e6
BUCKET_PARAMS_PER_DP_RANK = 1e6


@dataclass(frozen=True)
class DpScale:
    """Seconds one step spends on data-parallel work that is not hidden: ``grad_rs_s`` (gradient
    reduce-scatter after the pipeline), ``param_ag_s`` (what the first forward waits for the parameter
    all-gathers, :func:`param_gather_exposed_s`), ``once_s`` (once-per-step small all-reduces), ``straggler_s`` (waiting for the slowest
    data-parallel rank)."""

    grad_rs_s: float = 0.0
    param_ag_s: float = 0.0
    once_s: float = 0.0
    straggler_s: float = 0.0

    @property
    def exposed_comm_s(self) -> float:
        """The bucketed reduce-scatter and all-gather seconds on the step's path (``comm.dp_exposed``)."""
        return self.grad_rs_s + self.param_ag_s

    @property
    def total_s(self) -> float:
        return self.grad_rs_s + self.param_ag_s + self.once_s + self.straggler_s


def bucket_params(dp: int, configured: float = 0.0) -> float:
    """Parameters per DDP bucket for ``dp`` data-parallel ranks: ``configured`` when the framework sets one
    (``StackProfile.ddp_bucket_params``), else Megatron-Core's default for an unset ``bucket_size``
    (``DistributedDataParallel``: at least 40M, 1M per data-parallel rank).

    >>> bucket_params(8), bucket_params(256), bucket_params(256, 128 * 2**20)
    (40000000.0, 256000000.0, 134217728.0)
    """
    if configured > 0:
        return float(configured)
    return max(BUCKET_MIN_PARAMS, BUCKET_PARAMS_PER_DP_RANK * dp)


def _dp(ctx: Context) -> int:
    return ctx.plan.dp_shard * ctx.plan.cp


def _bucket(ctx: Context) -> float:
    """Parameters per bucket of this plan's data parallelism under this stack (:func:`bucket_params`)."""
    return bucket_params(_dp(ctx), ctx.wl.stack.ddp_bucket_params)


def _layer_local_params(ctx: Context, kind: str) -> tuple[float, float]:
    """(dense, expert) parameters of one layer on one rank before ZeRO sharding."""
    d, e = ctx.layer_shards(kind)
    return d * _dp(ctx), e * max(1, ctx.plan.expert_fsdp)


def _chunk_local_params(ctx: Context, layers: list[str]) -> tuple[float, float]:
    """(dense, expert) parameters of one chunk on one rank before ZeRO sharding (the DDP buffers' sizes)."""
    dense = expert = 0.0
    for k in layers:
        d, e = _layer_local_params(ctx, k)
        dense += d
        expert += e
    return dense, expert


def _buckets(n_params: float, size: float, split: bool) -> list[float]:
    """Bucket sizes (parameters) of one buffer in backward order; one bucket unless ``split``."""
    if n_params <= 0:
        return []
    if not split or n_params <= size:
        return [n_params]
    k = math.ceil(n_params / size)
    return [n_params / k] * k


def _rs_s(ctx: Context, n_params: float, group: str, what: str = "rs") -> float:
    """Ring reduce-scatter (gradients at the stack's width) or all-gather (bf16 weights) of one bucket of
    ``n_params`` local parameters over ``group`` (``dp`` or ``edp``): each rank's shard is 1/n of it."""
    n = len(ctx.group_ranks(group))
    if n <= 1 or n_params <= 0:
        return 0.0
    width = ctx.wl.stack.grad_bytes if what == "rs" else BF16
    return ctx.collective(what, n_params / n * width, group)


def grad_reduce_exposed_s(ctx: Context, layers_of: list[list[str]], pipe: PipelineResult) -> float:
    """Seconds the bucketed gradient reduce-scatters add after the pipeline's makespan: on each pipeline
    rank its buckets start when their chunk's last backward ends (the first chunk of pipeline rank 0 is cut
    into :func:`bucket_params` buckets, ready in order through that backward) and run one after another; the
    step's pipeline part ends when the last rank's last bucket is done."""
    size = _bucket(ctx)
    ready: dict[int, list[tuple[float, float]]] = {}
    last_b: dict[int, tuple[int, float, float]] = {}
    for (phase, stage, _mb), (rank, s, e) in pipe.timeline.items():
        if phase in ("B", "W", "FB") and (stage not in last_b or e > last_b[stage][2]):
            last_b[stage] = (rank, s, e)
    for stage, (rank, s, e) in last_b.items():
        dense, expert = _chunk_local_params(ctx, layers_of[stage])
        split = stage == 0  # Megatron buckets only the first chunk of the first pipeline rank
        for n_params, group in ((dense, "dp"), (expert, "edp")):
            parts = _buckets(n_params, size, split)
            for i, p in enumerate(parts):
                t_ready = s + (e - s) * (i + 1) / len(parts)
                ready.setdefault(rank, []).append((t_ready, _rs_s(ctx, p, group)))
    end = pipe.makespan
    for rank, items in ready.items():
        rank_end = max((a[4] for a in pipe.actions[rank]), default=0.0)
        t = 0.0
        for t_ready, dur in sorted(items):
            t = max(t, t_ready) + dur
        end = max(end, rank_end, t)
    return end - pipe.makespan


def _gather_s(ctx: Context, dense: float, expert: float) -> float:
    """One bucket's parameter all-gather: its dense shard over ``dp``, then its expert shard over ``edp``."""
    return _rs_s(ctx, dense, "dp", "ag") + _rs_s(ctx, expert, "edp", "ag")


def first_bucket_ag_s(ctx: Context, layers_of: list[list[str]]) -> float:
    """Seconds the first forward waits for the parameter all-gather of its first bucket, which nothing
    hides (a lower bound of :func:`param_gather_exposed_s`)."""
    buckets = _forward_buckets(ctx, layers_of[0], _bucket(ctx))
    return _gather_s(ctx, buckets[0][0], buckets[0][1]) if buckets else 0.0


def _forward_buckets(ctx: Context, layers: list[str], size: float) -> list[tuple[float, float, int]]:
    """The first chunk's buckets in forward order: (dense, expert) local parameters and the number of its
    layers each holds. Megatron-Core fills buckets in backward order (the last layers first) and closes one
    once it holds ``size`` parameters; layer granularity here, both buffers together."""
    out: list[tuple[float, float, int]] = []
    dense = expert = 0.0
    count = 0
    for k in reversed(layers):
        d, e = _layer_local_params(ctx, k)
        dense += d
        expert += e
        count += 1
        if dense + expert >= size:
            out.append((dense, expert, count))
            dense = expert = 0.0
            count = 0
    if count:
        out.append((dense, expert, count))
    return out[::-1]


def param_gather_exposed_s(ctx: Context, layers: list[str], forward_s: Sequence[float]) -> float:
    """Seconds the first forward of the first chunk (``layers``, each layer's forward seconds ``forward_s``)
    is longer for the parameter all-gathers it waits for: Megatron-Core's forward pre-hooks gather one
    bucket ahead (the first bucket is dispatched by the first hook and waited for; finishing bucket ``i``
    dispatches bucket ``i + 1``, which runs while the layers of bucket ``i`` compute). A bucket's gather is
    its dense shard over ``dp`` plus its expert shard over ``edp``, in bf16 (:func:`_gather_s`).

    Every bucket but the first is hidden when a bucket gathers faster than its layers compute; the first
    is always exposed (:func:`first_bucket_ag_s`)."""
    buckets = _forward_buckets(ctx, layers, _bucket(ctx))
    gathers = [_gather_s(ctx, dense, expert) for dense, expert, _ in buckets]
    computes, i = [], 0
    for _, _, count in buckets:
        computes.append(sum(forward_s[i:i + count]))
        i += count
    gathered = gathers[0] if gathers else 0.0  # the first hook dispatches the first gather and waits
    end = 0.0
    for n, compute in enumerate(computes):
        start = max(end, gathered)
        if n + 1 < len(gathers):
            gathered = start + gathers[n + 1]  # dispatched once bucket n's wait returns
        end = start + compute
    return max(0.0, end - sum(computes))


def once_per_step_s(ctx: Context) -> float:
    """Once-per-step small all-reduces on NCCL's tree: the gradient norm over every rank (one fp32), the loss
    over the data-parallel group (one fp32) and the expert-bias / token-count all-reduce over the data-parallel
    group (one fp32 per routed expert per MoE layer)."""
    cluster, c = ctx.cluster, ctx.ccosts
    world = list(range(ctx.plan.world_size))
    dp = ctx.group_ranks("dp")
    out = allreduce_tree_time(cluster, world, FP32, c) if len(world) > 1 else 0.0
    if len(dp) > 1:
        bias = FP32 * ctx.model.n_routed_experts * ctx.model.n_moe_layers
        out += allreduce_tree_time(cluster, dp, FP32, c)
        if bias > 0:
            out += allreduce_tree_time(cluster, dp, bias, c)
    return out


def straggler_s(busy_s: float, n_ranks: int, n_microbatches: int, cv: float) -> float:
    """Mean seconds the step waits for the slowest of ``n_ranks`` data-parallel ranks, each busy ``busy_s``
    over ``n_microbatches`` microbatches whose times vary with coefficient of variation ``cv`` (independent
    per microbatch: a rank's total spreads by ``cv / sqrt(m)``).

    >>> straggler_s(10.0, 1, 8, 0.05), straggler_s(10.0, 64, 8, 0.0)
    (0.0, 0.0)
    >>> straggler_s(10.0, 256, 60, 0.05) > straggler_s(10.0, 64, 240, 0.05)
    True
    """
    if n_ranks <= 1 or cv <= 0 or busy_s <= 0:
        return 0.0
    return barrier_wait_s(n_ranks, cv * busy_s / math.sqrt(max(1, n_microbatches)))


def first_forward_layer_s(layers: list[str], pipe: PipelineResult,
                          forward_s_of: Mapping[str, float] | None = None) -> list[float]:
    """Each layer's seconds in the first chunk's first forward: the schedule's duration of that forward
    (``("F", 0, 0)`` in ``pipe.timeline``) shared over ``layers`` in proportion to their forward seconds
    (``forward_s_of``, by layer kind; equal shares without it)."""
    weights = [forward_s_of.get(k, 0.0) for k in layers] if forward_s_of else [1.0] * len(layers)
    total = sum(weights)
    entry = pipe.timeline.get(("F", 0, 0))
    duration = entry[2] - entry[1] if entry else total
    if total <= 0:
        return [duration / len(layers)] * len(layers) if layers else []
    return [w * duration / total for w in weights]


def dp_scale(ctx: Context, layers_of: list[list[str]], pipe: PipelineResult,
             busy_of: Callable[[PipelineResult], float] | None = None,
             forward_s_of: Mapping[str, float] | None = None) -> DpScale:
    """The four terms of one step (``layers_of``: each chunk's layer kinds, by stage; ``pipe``: the simulated
    schedule; ``forward_s_of``: one microbatch's forward seconds of each layer kind, which shares the first
    forward among the parameter buckets). ZeRO-1 stacks get the bucket model and stragglers; every stack gets
    the once-per-step reductions."""
    plan = ctx.plan
    once = once_per_step_s(ctx)
    if not ctx.zero1:
        return DpScale(once_s=once)
    busy = busy_of(pipe) if busy_of else max(pipe.busy(r) for r in range(len(pipe.actions)))
    return DpScale(
        grad_rs_s=grad_reduce_exposed_s(ctx, layers_of, pipe),
        param_ag_s=(param_gather_exposed_s(ctx, layers_of[0], first_forward_layer_s(layers_of[0], pipe, forward_s_of))
                    if ctx.wl.stack.param_gather_one_ahead else first_bucket_ag_s(ctx, layers_of)),
        once_s=once,
        straggler_s=straggler_s(busy, plan.dp_shard * plan.dp_replicate, plan.n_microbatches,
                                ctx.ccosts.straggler_cv),
    )


def dp_floor_s(ctx: Context, layers_of: list[list[str]]) -> float:
    """The part of :func:`dp_scale` that needs no timeline (a lower bound of its total): the once-per-step
    reductions and, for ZeRO-1, the first bucket's parameter all-gather."""
    return once_per_step_s(ctx) + (first_bucket_ag_s(ctx, layers_of) if ctx.zero1 else 0.0)
