"""The inverse question: the smallest cluster, and its best plan, that trains a model on T tokens in D days.

For each GPU type, GPU counts are tried from small to large (powers of two, 64 to 65,536). At each count
the plan space is searched (:func:`studies.search.search`) with the step time the target allows as a
cap: a plan whose proven lower bound (:mod:`studies.bounds`) is slower is pruned unpredicted, so counts
that cannot make it cost little. The first count whose fastest fitting plan is fast enough is the
answer, with its runner-up plans (those fast enough too).

>>> a = smallest_cluster("deepseek-v3-16b", tokens=1e11, days=30, gpus=["b200"], space=SMALL_SPACE)
>>> a.best.n_gpus, a.best.days <= 30
(64, True)
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

__all__ = ["Answer", "Option", "smallest_cluster", "COUNTS", "SMALL_SPACE", "global_batch_for"]

COUNTS = tuple(2**i for i in range(6, 17))
SMALL_SPACE = PlanSpace(tp=(1,), pp=(1, 2), schedules=("1f1b",), vpp=(2,), ep=(8,), ac=("full",), micro_batch=(1,),
                        seq_len=2048)


def global_batch_for(n_gpus: int) -> int:
    """Sequences per step at ``n_gpus``: 4,096 up to 2,048 GPUs, then two per GPU (a large-scale run's
    batch grows with the cluster; 4,096 sequences leave no valid pipeline plan at 16,384 GPUs)."""
    return max(4096, 2 * n_gpus)


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


def smallest_cluster(model_name: str, *, tokens: float, days: float, gpus: list[str], space: PlanSpace | None = None,
                     precision: str | None = None, ep_backend: str = "deepep", stack: str = "torchtitan",
                     price: float | None = None, workers: int = 1, counts: tuple[int, ...] = COUNTS) -> Answer:
    """See the module docstring. ``precision`` None: MXFP8 where the GPU runs it, else BF16."""
    if not (tokens > 0 and days > 0) or tokens != tokens or days != days:
        raise ConfigError(f"plan: --tokens and --days must be positive, got {tokens} and {days}")
    t0 = time.perf_counter()
    model = load_model(model_name)
    need = tokens / (days * 86400.0)  # tokens/s for the whole cluster
    per_gpu: dict[str, Option | None] = {}
    skipped: dict[str, list[int]] = {}
    base = space or PlanSpace()
    for gpu in gpus:
        if gpu not in CLUSTER_TEMPLATE:
            raise ConfigError(f"plan: --gpu must be one of {', '.join(CLUSTER_TEMPLATE)}; got {gpu!r}")
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
        for n in counts:
            point = Point(model.name if not model_name.endswith((".json", ".toml")) else model_name, gpu, n, 0.0,
                          "template", 1.0, prec, ep_backend, stack, base.seq_len,
                          base.global_batch if space else global_batch_for(n))
            if n % (4 if gpu.startswith("gb") else 8):
                continue
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
    return Answer(model.name, tokens, days, best, per_gpu, skipped, time.perf_counter() - t0)
