"""One MoE dispatch/combine problem, as every backend receives it (built once by :func:`sim.comm.moe_alltoall`)."""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from sim.comm.costs import CommCosts
from sim.specs import ClusterSpec, ModelSpec

__all__ = ["Case"]


@dataclass(frozen=True, eq=False)
class Case:
    """``tokens`` per EP rank over ``ranks`` (canonical), one ``phase``; ``load``: expert load fractions (None:
    uniform), ``rank_load``: per-rank share, ``dom``: each rank's NVLink domain."""

    cluster: ClusterSpec
    ranks: tuple[int, ...]
    tokens: int
    model: ModelSpec
    backend: str
    phase: str
    costs: CommCosts
    bytes_per_elem: float
    num_sms: int
    load: np.ndarray | None
    seed: int
    routing: str
    topo: nx.DiGraph
    rank_load: np.ndarray
    dom: np.ndarray

    @property
    def n(self) -> int:
        return len(self.ranks)

    @property
    def internode(self) -> bool:
        """Whether the group spans more than one NVLink domain (bytes cross the scale-out fabric)."""
        return bool(np.unique(self.dom).size > 1)

    @property
    def token_bytes(self) -> float:
        return self.model.dim * self.bytes_per_elem

    def flat_matrix(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """[sender, receiver] bytes when every selected expert gets its own copy, and its NVLink / RDMA split."""
        n, k = self.n, self.model.top_k
        flat = np.tile(self.tokens * k * self.token_bytes * self.rank_load, (n, 1))
        np.fill_diagonal(flat, 0.0)
        if self.phase == "combine":
            flat = flat.T.copy()
        same = self.dom[:, None] == self.dom[None, :]
        return flat, np.where(same, flat, 0.0), np.where(same, 0.0, flat)
