"""Rank layout: global rank -> mesh coordinates, and the process groups of a plan (TorchTitan order).

The device mesh is ``[pp, dp_replicate, dp_shard, cp, tp]`` with ``tp`` innermost (consecutive ranks);
rank ``r`` is GPU ``r`` (node ``r // gpus_per_node``). Expert parallelism borrows ``dp_shard * cp``
(and ``tp`` when ``etp == 1``): the EP group of a rank is ``ep`` consecutive positions of that borrowed
block, and the remaining factor is the experts' FSDP group.

>>> from sim.specs import ParallelPlan
>>> plan = ParallelPlan(tp=2, pp=2, vpp=2, pp_schedule="interleaved-1f1b", ep=32, dp_shard=64,
...                     global_batch=4096, seq_len=8192)
>>> lay = Layout(plan)
>>> lay.ep_group(0) == list(range(32))
True
>>> lay.ep_group(200)[:2], lay.pp_group(5)
([192, 193], [5, 133])
>>> lay.tp_group(7), lay.coords(130)
([6, 7], Coords(pp=1, dp_replicate=0, dp_shard=1, cp=0, tp=0))
"""

from __future__ import annotations

from typing import NamedTuple

from sim.specs import ParallelPlan

__all__ = ["Coords", "Layout"]


class Coords(NamedTuple):
    pp: int
    dp_replicate: int
    dp_shard: int
    cp: int
    tp: int


class Layout:
    """Mesh coordinates and groups of ``plan`` (``plan.world_size`` ranks)."""

    def __init__(self, plan: ParallelPlan) -> None:
        self.plan = plan
        self.shape = (plan.pp, plan.dp_replicate, plan.dp_shard, plan.cp, plan.tp)
        strides = [1] * 5
        for i in range(3, -1, -1):
            strides[i] = strides[i + 1] * self.shape[i + 1]
        self.strides = tuple(strides)
        self.ep_inner = plan.tp if plan.etp == 1 else 1  # the trailing dims EP borrows

    @property
    def world_size(self) -> int:
        return self.plan.world_size

    def coords(self, rank: int) -> Coords:
        out = []
        for size, stride in zip(self.shape, self.strides):
            out.append((rank // stride) % size)
        return Coords(*out)

    def rank(self, c: Coords) -> int:
        return sum(v * s for v, s in zip(c, self.strides))

    def _group(self, rank: int, dims: tuple[int, ...]) -> list[int]:
        c = list(self.coords(rank))
        ranks = [0]
        for d in dims:
            ranks = [r + i * self.strides[d] for r in ranks for i in range(self.shape[d])]
        for d in dims:
            c[d] = 0
        base = self.rank(Coords(*c))
        return sorted(base + r for r in ranks)

    def tp_group(self, rank: int) -> list[int]:
        return self._group(rank, (4,))

    def cp_group(self, rank: int) -> list[int]:
        return self._group(rank, (3,))

    def pp_group(self, rank: int) -> list[int]:
        return self._group(rank, (0,))

    def dp_shard_group(self, rank: int) -> list[int]:
        """FSDP group of the dense weights (dp_shard x cp, as TorchTitan shards over both)."""
        return self._group(rank, (2, 3))

    def dp_replicate_group(self, rank: int) -> list[int]:
        return self._group(rank, (1,))

    def _borrowed_block(self, rank: int) -> tuple[int, int]:
        """(first rank, size) of the consecutive block EP borrows from (dp_shard, cp[, tp])."""
        c = self.coords(rank)
        size = self.plan.dp_shard * self.plan.cp * self.ep_inner
        first = self.rank(Coords(c.pp, c.dp_replicate, 0, 0, 0 if self.ep_inner > 1 else c.tp))
        return first, size

    def ep_group(self, rank: int) -> list[int]:
        """The ``ep`` ranks whose experts together hold every routed expert (consecutive positions)."""
        first, _ = self._borrowed_block(rank)
        step = 1 if self.ep_inner > 1 else self.plan.tp
        pos = (rank - first) // step
        start = pos - pos % self.plan.ep
        return [first + (start + i) * step for i in range(self.plan.ep)]

    def ep_rank(self, rank: int) -> int:
        return self.ep_group(rank).index(rank)

    def expert_fsdp_group(self, rank: int) -> list[int]:
        """Ranks sharing the same experts (same EP position in every EP group of the block)."""
        first, size = self._borrowed_block(rank)
        step = 1 if self.ep_inner > 1 else self.plan.tp
        pos = (rank - first) // step
        ep = self.plan.ep
        return [first + (pos % ep + j * ep) * step for j in range(size // (ep * self.ep_inner) * self.ep_inner)]
