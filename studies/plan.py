"""The inverse question: the smallest cluster, and its best plan, that trains a model on T tokens in D days.

For each GPU type, GPU counts are tried from small to large (powers of two up to 65,536, from the smallest
whole node or NVL domain slice that can hold the model's FP32 master weights and Adam moments,
:func:`min_gpus`; smaller counts are listed as ruled out, with the reason). At each count
the plan space is searched (:func:`studies.search.search`) with the step time the target allows as a
cap: a plan whose proven lower bound (:mod:`studies.bounds`) is slower is pruned unpredicted, so counts
that cannot make it cost little. The first count whose fastest fitting plan is fast enough is the
answer, with its runner-up plans (those fast enough too).

>>> a = smallest_cluster("deepseek-v3-16b", tokens=1e11, days=30, gpus=["b200"], space=SMALL_SPACE)
>>> a.best.n_gpus, a.best.days <= 30
(8, True)
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from sim.catalog import load_model
from sim.errors import ConfigError
from sim.specs import PRECISIONS
from studies._sim import interval_for
from studies.capacity import point_cluster
from studies.capacity_spec import CLUSTER_TEMPLATE, Point
from studies.search import Candidate, PlanSpace, search

__all__ = ["Answer", "Option", "smallest_cluster", "COUNTS", "SMALL_SPACE", "global_batch_for", "min_gpus",
           "GLOBAL_BATCH_POLICY"]

COUNTS = tuple(2**i for i in range(0, 17))
#: what :func:`global_batch_for` does, in words (printed by ``moesim plan``)
GLOBAL_BATCH_POLICY = "max(4096, 2 x GPUs) sequences per step"
#: bytes per parameter no plan can avoid storing somewhere: FP32 master weights and two FP32 Adam moments
_STATE_BYTES_PER_PARAM = 12
SMALL_SPACE = PlanSpace(tp=(1,), pp=(1, 2), schedules=("1f1b",), vpp=(2,), ep=(8,), ac=("full",), micro_batch=(1,),
                        seq_len=2048)


def global_batch_for(n_gpus: int) -> int:
    """Sequences per step at ``n_gpus``: 4,096 up to 2,048 GPUs, then two per GPU (a large-scale run's
    batch grows with the cluster; 4,096 sequences leave no valid pipeline plan at 16,384 GPUs)."""
    return max(4096, 2 * n_gpus)


def min_gpus(model: Any, gpu: str, headroom_gib: float = 0.0) -> int:
    """A lower bound of the GPUs that can hold ``model``: its FP32 master weights and Adam moments (12 bytes
    per parameter, sharded over every GPU at best) in the HBM a job can use, less ``headroom_gib``.

    >>> min_gpus(load_model("deepseek-v3-671b"), "b200")
    43
    """
    import math

    from sim.accounting import count_params
    from sim.catalog import load_gpu

    usable = load_gpu(gpu).hbm_bytes - headroom_gib * 2**30
    if usable <= 0:
        raise ConfigError(f"plan: --headroom-gib ({headroom_gib}) leaves no memory on {gpu}")
    return max(1, math.ceil(count_params(model).total * _STATE_BYTES_PER_PARAM / usable))


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

    def as_dict(self) -> dict[str, Any]:
        def cand(c: Candidate) -> dict[str, Any]:
            p = c.prediction
            return {"plan": dataclasses.asdict(c.plan), "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
                    "step_time_s": p.step_time_s, "mfu": p.mfu, "peak_memory_gib": p.peak_memory_bytes / 2**30,
                    "memory_capacity_gib": p.memory_capacity_bytes / 2**30}
        return {"gpu": self.gpu, "n_gpus": self.n_gpus, "days": self.days, "cost_usd": self.cost_usd,
                "interval_tokens_per_s_per_gpu": self.interval, "best": cand(self.best),
                "runner_ups": [cand(c) for c in self.runner_ups], "plans": self.searched}


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


def smallest_cluster(model_name: str, *, tokens: float, days: float, gpus: list[str], space: PlanSpace | None = None,
                     precision: str | None = None, ep_backend: str = "deepep", stack: str = "torchtitan",
                     price: float | None = None, workers: int = 1, counts: tuple[int, ...] = COUNTS,
                     global_batch: int | None = None, headroom_gib: float = 0.0,
                     progress: Any = None) -> Answer:
    """See the module docstring. ``precision`` None: MXFP8 where the GPU runs it, else BF16; ``global_batch``
    None: :data:`GLOBAL_BATCH_POLICY`; ``headroom_gib``: HBM every plan leaves free; ``progress(gpu, n,
    done, total)`` is called before each count is searched."""
    if not (tokens > 0 and days > 0) or tokens != tokens or days != days:
        raise ConfigError(f"plan: --tokens and --days must be positive, got {tokens} and {days}")
    t0 = time.perf_counter()
    model = load_model(model_name)
    need = tokens / (days * 86400.0)  # tokens/s for the whole cluster
    per_gpu: dict[str, Option | None] = {}
    skipped: dict[str, list[int]] = {}
    base = dataclasses.replace(space or PlanSpace(), headroom_gib=headroom_gib)
    too_small: dict[str, str] = {}
    todo: list[tuple[str, list[int]]] = []
    for gpu in gpus:
        if gpu not in CLUSTER_TEMPLATE:
            raise ConfigError(f"plan: --gpu must be one of {', '.join(CLUSTER_TEMPLATE)}; got {gpu!r}")
        step = 4 if gpu.startswith("gb") else 8  # whole HGX nodes; NVL72 racks in slices of 4
        floor = min_gpus(model, gpu, headroom_gib)
        todo.append((gpu, [n for n in counts if n % step == 0 and n >= floor]))
        small = [n for n in counts if n < floor or n % step]
        if small:
            too_small[gpu] = (f"{', '.join(map(str, small))}: below a whole node ({step} GPUs) or too few to hold "
                              f"the model's master weights and Adam moments (>= {floor} GPUs)")
    total = sum(len(c) for _g, c in todo)
    done = 0
    for gpu, gpu_counts in todo:
        from sim.catalog import load_gpu

        spec = load_gpu(gpu)
        prec = precision or ("mxfp8" if spec.mxfp8 else "bf16")
        if prec not in PRECISIONS:
            raise ConfigError(f"plan: --precision must be one of {', '.join(PRECISIONS)}; got {prec!r}")
        if prec in ("mxfp8", "mxfp8-grouped") and not spec.mxfp8:
            raise ConfigError(f"plan: precision {prec!r} needs block-scaled FP8 tensor cores (SM100, e.g. b200); "
                              f"{gpu} ({spec.arch}) would only run TorchAO's emulated path, which is slower than bf16")
        per_gpu[gpu] = None
        skipped[gpu] = []
        for n in gpu_counts:
            if progress is not None:
                progress(gpu, n, done, total)
            done += 1
            batch = global_batch or (base.global_batch if space else global_batch_for(n))
            point = Point(model.name if not model_name.endswith((".json", ".toml")) else model_name, gpu, n, 0.0,
                          "template", 1.0, prec, ep_backend, stack, base.seq_len, batch)
            cluster = point_cluster(point)
            sp = dataclasses.replace(base, global_batch=point.global_batch, precision=prec, ep_backend=ep_backend)
            # The step the target allows; plans whose proven lower bound is slower are pruned unpredicted.
            max_step = sp.global_batch * sp.seq_len / need
            result = search(model, cluster, sp, stack, keep=4, workers=workers, max_step_s=max_step)
            if result.best is None:
                skipped[gpu].append(n)
                continue
            tps = result.best.prediction.tokens_per_s_per_gpu
            took = tokens / (tps * n) / 86400.0
            if took <= days:
                per_gpu[gpu] = Option(gpu, n, result.best, result.runner_ups, took,
                                      None if price is None else took * 24 * n * price,
                                      interval_for(result.best.prediction, stack), result.counts)
                break
            skipped[gpu].append(n)
    found = [o for o in per_gpu.values() if o is not None]
    best = min(found, key=lambda o: (o.n_gpus, o.cost_usd or 0.0, o.days)) if found else None
    if progress is not None:
        progress("", 0, total, total)
    return Answer(model.name, tokens, days, best, per_gpu, skipped, time.perf_counter() - t0, too_small=too_small)
