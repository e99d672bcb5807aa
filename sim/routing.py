"""Token routing: how many token copies each expert (and so each EP rank) receives.

``balanced`` (the default, and what every published run forced) gives every expert the same share, each
token drawing its top-k at random (group-limited per the model). ``round-robin`` is TorchTitan's
``--debug.moe_force_load_balance`` taken literally: token ``t`` takes experts ``(t*K + k) % E``, so
every expert gets the same share but a token's K experts are consecutive (often on one EP rank), which
changes what node-deduplicating all-to-alls (DeepEP) send.
``zipf:<s>`` ranks experts by a seeded random permutation and weights rank ``i`` by ``1 / (i+1)^s``;
``dirichlet:<alpha>`` draws expert shares from a seeded symmetric Dirichlet; ``collapse:<k>`` is a router
collapsed onto experts ``0 .. k-1``, each taking an equal share (with contiguous placement, the first EP rank's
experts when ``k`` is their count: the most skewed routing, which a token capacity bounds); any other string is a path to
a tokens-per-expert file (JSON list, or text with one number per line). The step waits for the busiest
EP rank, so skew shows up as longer expert GEMMs there and unequal all-to-all traffic.

>>> import numpy as np
>>> load = expert_load("balanced", 8, seed=0)
>>> load.tolist() == [0.125] * 8
True
>>> bool(rank_load_factors(expert_load("zipf:1.2", 8, seed=3), ep=4).max() > 1)
True
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np

from sim.errors import ConfigError

__all__ = [
    "expert_load",
    "rank_load_factors",
    "capacity_load",
    "rank_budget_load",
    "routed_load",
    "is_balanced",
    "BALANCED_ROUTINGS",
    "expected_distinct_parts",
    "part_hit_probabilities",
]


BALANCED_ROUTINGS = ("balanced", "round-robin")


def is_balanced(routing: str) -> bool:
    """True when every expert receives the same share of token copies."""
    return routing in BALANCED_ROUTINGS


def expert_load(routing: str, n_experts: int, seed: int = 0) -> np.ndarray:
    """Fraction of routed token copies each expert receives (sums to 1), deterministic in ``seed``."""
    if is_balanced(routing):
        return np.full(n_experts, 1.0 / n_experts)
    rng = np.random.default_rng(seed)
    if routing.startswith("zipf:"):
        s = _param(routing)
        weights = 1.0 / np.arange(1, n_experts + 1) ** s
        load = weights[rng.permutation(n_experts)]
    elif routing.startswith("collapse:"):
        k = int(_param(routing))
        if k > n_experts:
            raise ConfigError(f"routing {routing!r}: the model has {n_experts} routed experts, fewer than {k}")
        load = np.zeros(n_experts)
        load[:k] = 1.0 / k
    elif routing.startswith("dirichlet:"):
        alpha = _param(routing)
        if alpha <= 0:
            raise ConfigError(f"routing {routing!r}: alpha must be positive")
        load = rng.dirichlet(np.full(n_experts, alpha))
    else:
        load = _read_file(routing, n_experts)
    load = np.asarray(load, dtype=float)
    if not np.all(np.isfinite(load)) or np.any(load < 0) or not load.max(initial=0.0) > 0:
        raise ConfigError(f"routing {routing!r}: tokens per expert must be finite, non-negative and not all zero")
    load = load / load.max()  # counts are relative: scaled to at most 1 first, so their sum cannot overflow
    return np.asarray(load / load.sum(), dtype=float)


def rank_load_factors(load: np.ndarray, ep: int) -> np.ndarray:
    """Each EP rank's received token copies relative to the balanced share (mean 1.0).

    Experts are placed contiguously: EP rank ``j`` holds experts ``j*E/ep .. (j+1)*E/ep - 1``.
    """
    per_rank = load.reshape(ep, -1).sum(axis=1)
    return np.asarray(per_rank * ep, dtype=float)


def capacity_load(load: np.ndarray, capacity_factor: float, pad: bool = False) -> np.ndarray:
    """Each expert's share of the routed copies it computes under a per-expert capacity (Megatron-Core's
    ``moe_expert_capacity_factor``): an expert keeps at most ``capacity_factor`` times the balanced share
    (``1 / E``) and the router drops the rest before the dispatch (``moe_token_drop_policy``; each sender
    drops at its own share, the same fraction here); with ``pad`` (``moe_pad_expert_input_to_capacity``)
    every expert is also padded up to that capacity, so each computes exactly it, whatever the routing.
    The result sums to the kept fraction (below 1 when copies drop, ``capacity_factor`` when padded).

    >>> capacity_load(np.array([0.5, 0.25, 0.125, 0.125]), 1.5).tolist()
    [0.375, 0.25, 0.125, 0.125]
    >>> capacity_load(np.full(4, 0.25), 1.25, pad=True).tolist()
    [0.3125, 0.3125, 0.3125, 0.3125]
    """
    cap = capacity_factor / load.size
    if pad:
        return np.full(load.size, cap, dtype=float)
    return np.asarray(np.minimum(np.asarray(load, dtype=float), cap), dtype=float)


def rank_budget_load(load: np.ndarray, ep: int, budget_factor: float) -> np.ndarray:
    """``load`` with each EP rank's received copies capped at ``budget_factor`` times the balanced share of a
    rank (Megatron-Core's ``moe_expert_rank_capacity_factor`` on HybridEP: a static receive budget of local
    tokens x top-k x the factor; the dispatch drops the copies over it), each capped rank's experts scaled
    down alike.

    >>> rank_budget_load(np.array([0.5, 0.3, 0.1, 0.1]), 2, 1.2).round(3).tolist()
    [0.375, 0.225, 0.1, 0.1]
    """
    per_rank = np.asarray(load, dtype=float).reshape(ep, -1)
    factors = per_rank.sum(axis=1) * ep
    scale = np.minimum(1.0, budget_factor / np.maximum(factors, 1e-300))
    return np.asarray((per_rank * scale[:, None]).ravel(), dtype=float)


def routed_load(routing: str, n_experts: int, ep: int, seed: int = 0, capacity_factor: float = 0.0,
                pad: bool = False, rank_budget_factor: float = 0.0, top_k: int = 1) -> np.ndarray:
    """Each expert's share of the routed copies it computes: :func:`expert_load`, then the per-expert
    capacity (:func:`capacity_load`; 0: dropless) and the per-rank receive budget (:func:`rank_budget_load`;
    0: none). Sums to 1 when nothing drops or pads: the dispatch's volume relative to dropless routing.
    ``top_k``: the experts each token takes, all distinct, so a router cannot collapse onto fewer.

    >>> routed_load("balanced", 8, ep=4).sum(), routed_load("balanced", 8, 4, capacity_factor=1.5, pad=True).sum()
    (np.float64(1.0), np.float64(1.5))
    >>> float(routed_load("zipf:1.2", 8, 4, seed=3, rank_budget_factor=1.1).reshape(4, -1).sum(1).max() * 4)
    1.1
    """
    if routing.startswith("collapse:") and int(_param(routing)) < top_k:
        raise ConfigError(f"plan: routing {routing!r}: each token takes {top_k} distinct experts (the model's "
                          f"top_k), more than the {int(_param(routing))} it collapses onto")
    load = expert_load(routing, n_experts, seed)
    if capacity_factor:
        load = capacity_load(load, capacity_factor, pad)
    if rank_budget_factor:
        load = rank_budget_load(load, ep, rank_budget_factor)
    return load


def _param(routing: str) -> float:
    try:
        return float(routing.split(":", 1)[1])
    except ValueError:
        raise ConfigError(f"routing {routing!r}: expected a number after ':'") from None


def _read_file(path: str, n_experts: int) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            f"routing {path!r}: not 'balanced', 'round-robin', 'zipf:<s>', 'dirichlet:<alpha>' or an existing "
            "tokens-per-expert file"
        )
    text = p.read_text(encoding="utf-8")
    try:
        values = json.loads(text) if p.suffix == ".json" else [float(x) for x in text.split()]
    except ValueError as err:
        raise ConfigError(f"routing {path!r}: malformed tokens-per-expert file: {err}") from None
    if not isinstance(values, list) or len(values) != n_experts:
        raise ConfigError(
            f"routing {path!r}: expected {n_experts} tokens-per-expert numbers, got "
            f"{len(values) if isinstance(values, list) else type(values).__name__}"
        )
    return np.asarray(values, dtype=float)


def expected_distinct_parts(
    n_experts: int, top_k: int, n_parts: int, *, n_group: int = 1, topk_group: int = 1
) -> float:
    """Expected distinct parts (GPUs, nodes) a token reaches, experts split into ``n_parts`` equal parts.

    Unrestricted: ``P * (1 - C(E - E/P, K) / C(E, K))`` (published.md s6). Group-limited routing (DeepSeek
    ``n_group``/``topk_group``) picks ``topk_group`` of ``n_group`` expert groups uniformly, then K experts
    among theirs uniformly; we average the same formula over the group choices.

    >>> e = expected_distinct_parts
    >>> round(e(256, 8, 8), 3), round(e(256, 8, 8, n_group=8, topk_group=4), 3)  # published: 5.30, 3.63
    (5.295, 3.629)
    """
    part = np.arange(n_experts) // (n_experts // n_parts)
    return float(part_hit_probabilities(n_experts, top_k, part, n_group=n_group, topk_group=topk_group).sum())


def _miss_ratio(pool: np.ndarray, m: np.ndarray, k: int) -> np.ndarray:
    """C(pool - m, k) / C(pool, k), elementwise."""
    out = np.ones(np.broadcast(pool, m).shape)
    for i in range(k):
        out *= np.clip((pool - m - i) / (pool - i), 0.0, None)
    return out


def part_hit_probabilities(
    n_experts: int,
    top_k: int,
    part_of_expert: np.ndarray,
    *,
    n_group: int = 1,
    topk_group: int = 1,
    expert_load: np.ndarray | None = None,
    seed: int = 0,
    samples: int = 4096,
    routing: str = "random",
) -> np.ndarray:
    """Probability that one token's top-k reaches each part (``part_of_expert[e]`` = part of expert e).

    Uniform routing is exact (enumerating group choices); a skewed ``expert_load`` is sampled with
    ``samples`` tokens (Gumbel top-k on log load, groups by their summed load), seeded by ``seed``.
    ``routing="round-robin"`` is TorchTitan's ``_debug_force_load_balance`` (``--debug.moe_force_load_balance``,
    used by the published.md s1 runs): token t takes experts ``(t*K + k) % E``, k < K, so its K experts
    are consecutive and usually on one rank (exact, by enumerating one period of tokens).

    >>> part_hit_probabilities(4, 1, np.array([0, 0, 1, 1])).tolist()
    [0.5, 0.5]
    """
    part = np.asarray(part_of_expert, dtype=np.int64)
    n_parts = int(part.max()) + 1
    if routing == "round-robin":
        period = n_experts // math.gcd(top_k, n_experts)
        experts = (np.arange(period * top_k).reshape(period, top_k)) % n_experts
        hit_rr = np.zeros((period, n_parts), dtype=bool)
        np.put_along_axis(hit_rr, part[experts], True, axis=1)
        return np.asarray(hit_rr.mean(axis=0), dtype=float)
    if routing != "random":
        raise ConfigError(f"routing must be 'random' or 'round-robin', got {routing!r}")
    per_group = n_experts // n_group
    group = np.arange(n_experts) // per_group
    limited = n_group > 1 and topk_group < n_group
    if expert_load is None and (not limited or math.comb(n_group, topk_group) <= 20000):
        cnt = np.zeros((n_group, n_parts))
        np.add.at(cnt, (group, part), 1.0)
        if limited:
            combos = np.array(list(itertools.combinations(range(n_group), topk_group)))
            sel = np.zeros((len(combos), n_group))
            np.put_along_axis(sel, combos, 1.0, axis=1)
        else:
            sel = np.ones((1, n_group))
        m = sel @ cnt  # experts of each part in the selected pool
        pool = sel.sum(axis=1, keepdims=True) * per_group
        return np.asarray((1.0 - _miss_ratio(pool, m, top_k)).mean(axis=0), dtype=float)
    rng = np.random.default_rng(seed)
    load = np.full(n_experts, 1.0 / n_experts) if expert_load is None else np.asarray(expert_load, float)
    with np.errstate(divide="ignore"):
        logit = np.log(load)
    scores = logit[None, :] + rng.gumbel(size=(samples, n_experts))
    if limited:
        gl = np.bincount(group, weights=load, minlength=n_group)
        with np.errstate(divide="ignore"):
            gs = np.log(gl)[None, :] + rng.gumbel(size=(samples, n_group))
        top_groups = np.argpartition(-gs, topk_group - 1, axis=1)[:, :topk_group]
        allowed = np.zeros((samples, n_group), dtype=bool)
        np.put_along_axis(allowed, top_groups, True, axis=1)
        scores = np.where(allowed[:, group], scores, -np.inf)
    top = np.argpartition(-scores, top_k - 1, axis=1)[:, :top_k]
    hit = np.zeros((samples, n_parts), dtype=bool)
    np.put_along_axis(hit, part[top], True, axis=1)
    return np.asarray(hit.mean(axis=0), dtype=float)
