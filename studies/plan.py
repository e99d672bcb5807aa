"""The inverse question: the smallest cluster, and its best plan, that trains a model on T tokens in D days.

GPU counts are whole units of the machine: HGX nodes (8 GPUs), NVL72 racks (72 GPUs, or the ranks the stack
places per rack: Megatron-Bridge's 64; :func:`count_unit`). The search over counts starts at a proven floor, the
largest of: the GPUs that can hold the model's FP32 master weights and Adam moments (:func:`min_gpus`), the GPUs
that reach the target at the datasheet peak (:func:`flops_floor_gpus`), and those that reach it at the best
compute-only rate any plan shape of the space allows (:func:`studies.search.max_rate_per_gpu`); smaller counts
are listed as ruled out, with the reason. It then doubles the unit count (through the powers of two) until one
meets the target, and bisects between the last count that missed and the first that met it until they are one
unit apart, each time at the roundest count between them (the most factors of two: the most EP, TP and PP
degrees divide it, so the most plans run there).

What bisection assumes: a larger cluster never trains slower in total. The simulator does not guarantee it
(per-GPU throughput falls slowly with the count, and a count whose odd factor leaves few EP degrees may lose
to a smaller, rounder one), so the answer is the smallest count found, and what the test of an answer checks
holds by construction: its count meets the target and the count one unit smaller was searched and misses it.
Every count tried is reported, with what happened there.

At each count the plan space is searched (:func:`studies.search.search`) with the step time the target
allows as a cap: a plan whose proven lower bound (:mod:`studies.bounds`) is slower is pruned unpredicted, so
counts that cannot make it cost little; the probes stop at the first plan that meets the target, and only the
answer's count is searched for its fastest plan and runner-ups. A plan fits only with the allocator's
measured overhead on top of its predicted tensors (:data:`ALLOCATOR_OVERHEAD`).

>>> a = smallest_cluster("deepseek-v3-16b", tokens=1e11, days=30, gpus=["b200"], space=SMALL_SPACE)
>>> a.best.n_gpus, a.best.days <= 30
(8, True)
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

from sim.catalog import load_cluster, load_gpu, load_model
from sim.errors import ConfigError
from sim.specs import PRECISIONS
from studies._sim import interval_for, stack_profile
from studies.capacity import point_cluster
from studies.capacity_spec import CLUSTER_TEMPLATE, Point
from studies.search import Candidate, PlanSpace, check_space, max_rate_per_gpu, search

__all__ = ["ALLOCATOR_OVERHEAD", "GLOBAL_BATCH_POLICY", "MAX_GPUS", "SMALL_SPACE", "Answer", "Option", "Tried",
           "count_unit", "flops_floor_gpus", "global_batch_for", "min_gpus", "smallest_cluster"]

#: the most GPUs a plan search considers
MAX_GPUS = 65536
#: Memory the caching allocator holds above the tensors moesim predicts, as a fraction of them: TorchTitan's
#: 512-H100 pair logged reserved peaks (``max_reserved_gib``) of 60.18 and 56.75 GiB where moesim predicts
#: 55.4 GiB of tensors for each (README "Memory is checked where a run logged it"; +8.6% and +2.4%): the
#: larger, so a plan that fits here fitted those runs.
ALLOCATOR_OVERHEAD = 60.18 / 55.4 - 1
#: what :func:`global_batch_for` does, in words (printed by ``moesim plan``)
GLOBAL_BATCH_POLICY = "max(4096, 2 x GPUs) sequences per step, rounded up to a whole number per GPU"
#: bytes per parameter no plan can avoid storing somewhere: FP32 master weights and two FP32 Adam moments
_STATE_BYTES_PER_PARAM = 12
SMALL_SPACE = PlanSpace(tp=(1,), pp=(1, 2), schedules=("1f1b",), vpp=(2,), ep=(8,), ac=("full",), micro_batch=(1,),
                        seq_len=2048)


def global_batch_for(n_gpus: int) -> int:
    """Sequences per step at ``n_gpus``: 4,096 up to 2,048 GPUs, then two per GPU (a large-scale run's
    batch grows with the cluster; 4,096 sequences leave no valid pipeline plan at 16,384 GPUs), rounded up
    to a multiple of ``n_gpus`` so that every data-parallel width of a node-granular count divides it.

    >>> global_batch_for(256), global_batch_for(3072), global_batch_for(216), global_batch_for(4608)
    (4096, 6144, 4104, 9216)
    """
    return math.ceil(max(4096, 2 * n_gpus) / n_gpus) * n_gpus


def min_gpus(model: Any, gpu: str, headroom_gib: float = 0.0) -> int:
    """A lower bound of the GPUs that can hold ``model``: its FP32 master weights and Adam moments (12 bytes
    per parameter, sharded over every GPU at best) in the HBM a job can use, less ``headroom_gib``.

    >>> min_gpus(load_model("deepseek-v3-671b"), "b200")
    43
    """
    from sim.accounting import count_params

    usable = load_gpu(gpu).hbm_bytes - headroom_gib * 2**30
    if usable <= 0:
        raise ConfigError(f"plan: --headroom-gib ({headroom_gib}) leaves no memory on {gpu}")
    return max(1, math.ceil(count_params(model).total * _STATE_BYTES_PER_PARAM / usable))


def flops_floor_gpus(model: Any, gpu: str, precision: str, seq_len: int, tokens_per_s: float) -> int:
    """A lower bound of the GPUs that train ``tokens_per_s``: the model's exact training FLOPs per token at the
    datasheet peak of the fastest precision the plan may use (:func:`studies.bounds.peak_bound_s`'s bound,
    which no prediction beats).

    >>> flops_floor_gpus(load_model("deepseek-v3-671b"), "b200", "mxfp8", 4096, 10e12 / (30 * 86400))
    215
    """
    from sim.accounting import exact_flops_per_token

    spec = load_gpu(gpu)
    peak = spec.bf16_flops if precision == "bf16" else max(spec.fp8_flops, spec.bf16_flops)
    return _whole_gpus(exact_flops_per_token(model, seq_len) * tokens_per_s / peak)


def _whole_gpus(count: float) -> int:
    """``count`` GPUs rounded up to a whole one (at least 1); beyond :data:`MAX_GPUS` (or not finite: a target of
    ``--tokens`` in a vanishing ``--days``) one more than it, a count no search reaches."""
    if not count <= MAX_GPUS:
        return MAX_GPUS + 1
    return max(1, math.ceil(count))


def count_unit(gpu: str, stack: str) -> tuple[int, int]:
    """(GPUs a count grows by, GPUs per rack or 0): an HGX node (8), or an NVL72 rack as ``stack`` places ranks
    on it (every GPU of the rack, or ``nvlink_domain_ranks`` of them: Megatron-Bridge's 64 of 72).

    >>> count_unit("b200", "torchtitan"), count_unit("gb200", "torchtitan"), count_unit("gb200", "megatron")
    ((8, 0), (72, 72), (64, 72))
    """
    cluster = load_cluster(CLUSTER_TEMPLATE[gpu], gpu=gpu)
    rack = cluster.nvlink_domain_gpus
    if rack <= cluster.gpus_per_node:
        return cluster.gpus_per_node, 0
    per_rack = stack_profile(stack).nvlink_domain_ranks
    used = per_rack if 0 < per_rack < rack and per_rack % cluster.gpus_per_node == 0 else rack
    return used, rack


@dataclass(frozen=True)
class Tried:
    """One GPU count the search tried: what happened there (``meets``, ``too slow``, ``no plan fits``)."""

    n_gpus: int
    outcome: str
    days: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"n_gpus": self.n_gpus, "outcome": self.outcome, "days": self.days}


@dataclass
class Option:
    """One cluster that meets the target: GPU type and count, its best plan, and its runner-ups."""

    gpu: str
    n_gpus: int
    best: Candidate
    runner_ups: list[Candidate]
    days: float
    cost_usd: float | None
    interval: tuple[float, float] | None
    searched: dict[str, int]
    #: NVL72 racks the count occupies (0: HGX nodes), and the GPUs of those racks the plan leaves idle
    racks: int = 0
    idle_gpus: int = 0

    @property
    def days_interval(self) -> tuple[float, float] | None:
        """(days at the interval's fast end, p90 tokens/s; days at its slow end, p10): the target's days are met at
        the point prediction, and this is how far the interval moves them. None without an interval."""
        if self.interval is None or not all(x > 0 and math.isfinite(x) for x in self.interval):
            return None
        point = self.best.prediction.tokens_per_s_per_gpu
        return self.days * point / self.interval[1], self.days * point / self.interval[0]

    def as_dict(self) -> dict[str, Any]:
        def cand(c: Candidate) -> dict[str, Any]:
            p = c.prediction
            return {"plan": dataclasses.asdict(c.plan), "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
                    "step_time_s": p.step_time_s, "mfu": p.mfu, "peak_memory_gib": p.peak_memory_bytes / 2**30,
                    "memory_capacity_gib": p.memory_capacity_bytes / 2**30}
        out = {"gpu": self.gpu, "n_gpus": self.n_gpus, "days": self.days, "cost_usd": self.cost_usd,
               "interval_tokens_per_s_per_gpu": self.interval, "days_interval": self.days_interval,
               "best": cand(self.best),
               "runner_ups": [cand(c) for c in self.runner_ups], "plans": self.searched}
        if self.racks:
            out.update(racks=self.racks, idle_gpus=self.idle_gpus)
        return out


@dataclass
class Answer:
    """The smallest cluster over the GPU types tried (``best``), and each type's answer."""

    model: str
    tokens: float
    days: float
    best: Option | None
    per_gpu: dict[str, Option | None]
    skipped: dict[str, list[int]]
    elapsed_s: float
    notes: list[str] = field(default_factory=list)
    #: per GPU type: counts ruled out without a search, and why
    too_small: dict[str, str] = field(default_factory=dict)
    #: per GPU type: every count searched, in the order tried, and what happened there
    tried: dict[str, list[Tried]] = field(default_factory=dict)
    #: per GPU type: the unit counts grow by (an HGX node, an NVL72 rack as the stack fills it)
    unit: dict[str, int] = field(default_factory=dict)
    #: per GPU type: GPUs per rack (NVL72: 72), 0 for HGX nodes
    rack: dict[str, int] = field(default_factory=dict)

    def unit_text(self, gpu: str) -> str:
        """How counts of ``gpu`` grow, in words."""
        unit, rack = self.unit.get(gpu, 8), self.rack.get(gpu, 0)
        if rack:
            return f"whole NVL72 racks ({unit} of {rack} GPUs used)" if unit < rack else f"whole {rack}-GPU NVL72 racks"
        return f"whole {unit}-GPU nodes"


def _precision(gpu: str, precision: str | None, stack: str) -> str:
    """The plan's precision on ``gpu``: the one asked for, else MXFP8 where the GPU and the stack run it, else BF16."""
    spec = load_gpu(gpu)
    prec = precision or ("mxfp8" if spec.mxfp8 and "mxfp8" in stack_profile(stack).precisions else "bf16")
    if prec not in PRECISIONS:
        raise ConfigError(f"plan: --precision must be one of {', '.join(PRECISIONS)}; got {prec!r}")
    if prec in ("mxfp8", "mxfp8-grouped") and not spec.mxfp8:
        raise ConfigError(f"plan: precision {prec!r} needs block-scaled FP8 tensor cores (SM100, e.g. b200); "
                          f"{gpu} ({spec.arch}) would only run TorchAO's emulated path, which is slower than bf16")
    return prec


def _roundest(lo: int, hi: int) -> int:
    """The number in ``lo + 1 .. hi - 1`` with the most factors of two (the nearest to the middle among those):
    a count with a large power-of-two part admits the most parallel plans (EP, TP and PP degrees are powers of
    two), so the search tries it before its odd neighbours.

    >>> _roundest(216, 432), _roundest(256, 384), _roundest(383, 385)
    (256, 320, 384)
    """
    best = lo + 1
    for k in range(lo + 1, hi):
        if (k & -k) > (best & -best) or ((k & -k) == (best & -best) and abs(2 * k - lo - hi) < abs(2 * best - lo - hi)):
            best = k
    return best


def _unit_counts(lo_k: int, hi_k: int, meets: Any) -> int | None:
    """The smallest unit count in ``lo_k..hi_k`` for which ``meets(k)`` holds: ``lo_k``, then doubling through
    the powers of two above it until one meets the target, then bisecting between the last miss and the first
    hit, each time at the roundest count between them (:func:`_roundest`), until they are one unit apart.
    None when ``hi_k`` misses too.

    >>> tried = []
    >>> _unit_counts(27, 8192, lambda k: tried.append(k) or k >= 300), tried
    (300, [27, 32, 64, 128, 256, 512, 384, 320, 288, 304, 296, 300, 298, 299])
    """
    miss, k = lo_k - 1, lo_k
    while True:
        if meets(k):
            hit = k
            break
        miss = k
        if k >= hi_k:
            return None
        k = min(1 << k.bit_length(), hi_k)  # the next power of two above k
    while hit - miss > 1:
        k = _roundest(miss, hit)
        if meets(k):
            hit = k
        else:
            miss = k
    return hit


def smallest_cluster(model_name: str, *, tokens: float, days: float, gpus: list[str], space: PlanSpace | None = None,
                     precision: str | None = None, ep_backend: str = "deepep", stack: str = "torchtitan",
                     price: float | None = None, workers: int = 1, gpus_range: tuple[int, int] | None = None,
                     global_batch: int | None = None, headroom_gib: float = 0.0,
                     headroom_fraction: float = ALLOCATOR_OVERHEAD, progress: Any = None) -> Answer:
    """See the module docstring. ``precision`` None: MXFP8 where the GPU and the stack run it, else BF16;
    ``global_batch`` None: :data:`GLOBAL_BATCH_POLICY` (also with ``space``, whose own global batch is not
    used); ``gpus_range``: the least and most GPUs to consider;
    ``headroom_gib`` and ``headroom_fraction``: HBM every plan leaves free (GiB, and a fraction of its
    predicted peak); ``progress(gpu, n, done, total)`` is called before each count is searched (``total``:
    the counts known so far)."""
    if not (tokens > 0 and days > 0) or tokens != tokens or days != days:
        raise ConfigError(f"plan: --tokens and --days must be positive, got {tokens} and {days}")
    low_gpus, high_gpus = gpus_range or (1, MAX_GPUS)
    if not 1 <= low_gpus <= high_gpus <= MAX_GPUS:
        raise ConfigError(f"plan: --gpus-range must be MIN:MAX with 1 <= MIN <= MAX <= {MAX_GPUS}; "
                          f"got {low_gpus}:{high_gpus}")
    t0 = time.perf_counter()
    model = load_model(model_name)
    need = tokens / (days * 86400.0)  # tokens/s for the whole cluster
    base = dataclasses.replace(space or PlanSpace(), headroom_gib=headroom_gib, headroom_fraction=headroom_fraction)
    answer = Answer(model.name, tokens, days, None, {}, {}, 0.0)
    plans: list[tuple[str, str, int, int, int, int]] = []
    for gpu in gpus:
        if gpu not in CLUSTER_TEMPLATE:
            raise ConfigError(f"plan: --gpu must be one of {', '.join(CLUSTER_TEMPLATE)}; got {gpu!r}")
        prec = _precision(gpu, precision, stack)
        check_space(dataclasses.replace(base, precision=prec, ep_backend=ep_backend), stack)
        unit, rack = count_unit(gpu, stack)
        memory_floor = min_gpus(model, gpu, headroom_gib)
        speed_floor = max(flops_floor_gpus(model, gpu, prec, base.seq_len, need),
                          _whole_gpus(need / max_rate_per_gpu(model, load_cluster(CLUSTER_TEMPLATE[gpu], gpu=gpu),
                                                            dataclasses.replace(base, precision=prec,
                                                                                ep_backend=ep_backend), stack)))
        lo_k = max(math.ceil(max(memory_floor, speed_floor, low_gpus) / unit), 1)
        hi_k = high_gpus // unit
        answer.unit[gpu], answer.rack[gpu] = unit, rack
        what = answer.unit_text(gpu)
        why = [f"counts are {what}"]
        if memory_floor > 1:
            why.append(f"fewer than {memory_floor} GPUs cannot hold the model's master weights and Adam moments")
        if speed_floor > 1:
            why.append(f"fewer than {speed_floor} miss the target even at their compute alone ({prec}, studies.bounds)")
        if gpus_range:
            why.append(f"--gpus-range starts at {low_gpus}")
        answer.too_small[gpu] = f"below {lo_k * unit}: " + "; ".join(why)
        plans.append((gpu, prec, unit, rack, lo_k, hi_k))
    done = 0
    for gpu, prec, unit, rack, lo_k, hi_k in plans:
        answer.per_gpu[gpu] = None
        answer.skipped[gpu] = []
        answer.tried[gpu] = []

        hint: list[Any] = []  # the plan that last met the target: the next probe tries its shape first

        def meets(k: int, gpu: str = gpu, prec: str = prec, unit: int = unit, hint: list[Any] = hint) -> bool:
            nonlocal done
            n = k * unit
            if progress is not None:
                progress(gpu, n, done, done + 1)
            done += 1
            option = _search_count(model, model_name, gpu, n, prec, ep_backend, stack, base,
                                   global_batch, need, 1, first_fit=True, guess=hint[-1] if hint else None)
            if isinstance(option, str):
                answer.tried[gpu].append(Tried(n, option))
                answer.skipped[gpu].append(n)
                return False
            took = tokens / (option.best.prediction.tokens_per_s_per_gpu * n) / 86400.0
            ok = took <= days
            answer.tried[gpu].append(Tried(n, "meets the target" if ok else "too slow", took))
            if ok:
                hint.append(option.best.plan)
            else:
                answer.skipped[gpu].append(n)
            return ok

        k = _unit_counts(lo_k, hi_k, meets) if lo_k <= hi_k else None
        if k is not None:  # the answer's count: its fastest plan and runner-ups (the probes stopped at the first)
            n = k * unit
            option = _search_count(model, model_name, gpu, n, prec, ep_backend, stack, base,
                                   global_batch, need, workers)
            assert not isinstance(option, str), "a count that met the target has a plan that meets it"
            option.days = tokens / (option.best.prediction.tokens_per_s_per_gpu * n) / 86400.0
            option.cost_usd = None if price is None else option.days * 24 * n * price
            option.interval = interval_for(option.best.prediction, stack)
            if rack:
                option.racks, option.idle_gpus = k, k * rack - n
            answer.per_gpu[gpu] = option
    found_all = [o for o in answer.per_gpu.values() if o is not None]
    # GPUs occupied (an NVL72 rack's idle GPUs are bought too), then cost, then days
    answer.best = (min(found_all, key=lambda o: (o.n_gpus + o.idle_gpus, o.cost_usd or 0.0, o.days))
                   if found_all else None)
    if progress is not None:
        progress("", 0, done, done)
    answer.elapsed_s = time.perf_counter() - t0
    return answer


def _search_count(model: Any, model_name: str, gpu: str, n: int, prec: str, ep_backend: str, stack: str,
                  base: PlanSpace, global_batch: int | None, need: float,
                  workers: int, first_fit: bool = False, guess: Any = None) -> Option | str:
    """The fastest plan at ``n`` GPUs that reaches the needed rate (an :class:`Option` whose days and cost the
    caller fills; ``first_fit``: the first plan found that reaches it), or why none does."""
    batch = global_batch or global_batch_for(n)
    point = Point(model.name if not model_name.endswith((".json", ".toml")) else model_name, gpu, n, 0.0,
                  "template", 1.0, prec, ep_backend, stack, base.seq_len, batch)
    cluster = point_cluster(point)
    sp = dataclasses.replace(base, global_batch=point.global_batch, precision=prec, ep_backend=ep_backend)
    # The step the target allows; plans whose proven lower bound is slower are pruned unpredicted.
    max_step = sp.global_batch * sp.seq_len / need
    result = search(model, cluster, sp, stack, keep=4, workers=workers, max_step_s=max_step, first_fit=first_fit,
                    guess=guess)
    if result.best is None:
        if result.counts["valid"] == 0:
            return "no valid plan"
        if result.counts["fits"] == 0 and not result.counts["over_target"]:
            return "no plan fits"
        return "too slow" if result.counts["fits"] or not result.counts["no_fit"] else "too slow or does not fit"
    return Option(gpu, n, result.best, result.runner_ups, 0.0, None, None, result.counts)
