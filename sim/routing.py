"""Token routing: how many token copies each expert (and so each EP rank) receives.

``balanced`` (the default, and what every published run forced) gives every expert the same share, each
token drawing its top-k at random (group-limited per the model). ``round-robin`` is TorchTitan's
``--debug.moe_force_load_balance`` taken literally: token ``t`` takes experts ``(t*K + k) % E``, so
every expert gets the same share but a token's K experts are consecutive (often on one EP rank), which
changes what node-deduplicating all-to-alls (DeepEP) send.
``zipf:<s>`` ranks experts by a seeded random permutation and weights rank ``i`` by ``1 / (i+1)^s``;
``dirichlet:<alpha>`` draws expert shares from a seeded symmetric Dirichlet; any other string is a path to
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

import json
from pathlib import Path

import numpy as np

from sim.errors import ConfigError

__all__ = ["expert_load", "rank_load_factors", "is_balanced", "BALANCED_ROUTINGS"]


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
    elif routing.startswith("dirichlet:"):
        alpha = _param(routing)
        if alpha <= 0:
            raise ConfigError(f"routing {routing!r}: alpha must be positive")
        load = rng.dirichlet(np.full(n_experts, alpha))
    else:
        load = _read_file(routing, n_experts)
    load = np.asarray(load, dtype=float)
    total = load.sum()
    if total <= 0 or np.any(load < 0):
        raise ConfigError(f"routing {routing!r}: tokens per expert must be non-negative and not all zero")
    return load / total


def rank_load_factors(load: np.ndarray, ep: int) -> np.ndarray:
    """Each EP rank's received token copies relative to the balanced share (mean 1.0).

    Experts are placed contiguously: EP rank ``j`` holds experts ``j*E/ep .. (j+1)*E/ep - 1``.
    """
    per_rank = load.reshape(ep, -1).sum(axis=1)
    return per_rank * ep


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
