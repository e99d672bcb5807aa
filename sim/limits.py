"""Bounds of every spec field, in one table: the sane range a value may take before any arithmetic runs.

Each spec's ``__post_init__`` calls :func:`check_fields` with its table, and :mod:`sim.loaders` builds its
typed schema (msgspec ``Annotated`` constraints) from the same tables, so a file, a flag and a Python
caller meet the same limits. Maxima are far above any real system (they only exist to bound the work
of one prediction and to stop overflow): a value outside them is a typo or a fuzzer, not a plan.

Floats must be finite; integers must be ``int`` (not ``bool``). Messages name the owner, the field and
the value.

>>> check_fields("plan", {"tp": 0}, {"tp": (1, 1024)})
Traceback (most recent call last):
...
sim.errors.ConfigError: plan: tp must be positive, got 0
>>> check_finite("cluster 'x'", "nic_latency_s", float("inf"))
Traceback (most recent call last):
...
sim.errors.ConfigError: cluster 'x': nic_latency_s must be a finite number, got inf
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

__all__ = [
    "Bound",
    "MODEL_BOUNDS",
    "GPU_BOUNDS",
    "FABRIC_BOUNDS",
    "CLUSTER_BOUNDS",
    "PLAN_BOUNDS",
    "MAX_MICROBATCHES",
    "MAX_COMPARE_VARIANTS",
    "MAX_TOKENS_PER_STEP",
    "MAX_JSON_DEPTH",
    "MAX_INPUT_MB",
    "MAX_TRACE_MB",
    "MAX_TRACE_EVENTS",
    "MAX_TRACE_MICROBATCHES",
    "MAX_CAPACITY_POINTS",
    "MAX_WORKERS",
    "ZERO_OR_AT_LEAST",
    "WORKERS_PER_CPU",
    "MB",
    "env_limit",
    "max_workers",
    "check_workers",
    "check_fields",
    "check_finite",
    "check_routing",
    "json_depth",
]

Bound = tuple[float, float]
"""Inclusive ``(low, high)`` range of one field."""

_BIG = 1 << 24  # 16.7 M: model widths, vocabularies
TERA = 1e12

MODEL_BOUNDS: dict[str, Bound] = {
    "n_layers": (1, 4096),
    "dim": (1, 1 << 20),
    "n_heads": (1, 1 << 16),
    "vocab_size": (1, _BIG),
    "n_routed_experts": (1, 1 << 16),
    "top_k": (1, 1 << 12),
    "moe_inter_dim": (1, 1 << 22),
    "n_dense_layers": (0, 4096),
    "dense_inter_dim": (0, 1 << 22),
    "n_shared_experts": (0, 1 << 12),
    "q_lora_rank": (0, 1 << 20),
    "kv_lora_rank": (0, 1 << 20),
    "qk_nope_head_dim": (0, 1 << 16),
    "qk_rope_head_dim": (0, 1 << 16),
    "v_head_dim": (0, 1 << 16),
    "n_kv_heads": (0, 1 << 16),
    "head_dim": (0, 1 << 16),
    "n_group": (1, 1 << 16),
    "topk_group": (1, 1 << 16),
    "route_scale": (1e-6, 1e6),
    "n_mtp_layers": (0, 64),
    "sliding_window": (0, 1 << 24),
    "full_attention_interval": (0, 4096),
}

GPU_BOUNDS: dict[str, Bound] = {
    "bf16_flops": (1e9, 1e18),  # 1 GFLOPS .. 1 EFLOPS per GPU
    "fp8_flops": (1e9, 1e18),
    "fp4_flops": (0.0, 1e18),
    "hbm_bytes": (1e6, 1e15),  # 1 MB .. 1 PB
    "hbm_bw_bytes_per_s": (1e6, 1e15),
    "num_sms": (1, 1 << 16),
    "nvlink_bw_bytes_per_s": (1e6, 1e15),
}

FABRIC_BOUNDS: dict[str, Bound] = {
    "tiers": (2, 3),
    "nodes_per_leaf": (1, 1 << 16),
    "leaf_oversubscription": (1e-3, 1e3),
    "spine_oversubscription": (1e-3, 1e3),
    "hop_latency_s": (0.0, 1.0),
    "nic_latency_s": (0.0, 1.0),
}

CLUSTER_BOUNDS: dict[str, Bound] = {
    "n_gpus": (1, 1 << 20),  # 1 M GPUs
    "gpus_per_node": (1, 1024),
    "nvlink_domain_gpus": (1, 1 << 14),
    "nvlink_bw_bytes_per_s": (0.0, 1e15),
    "nvlink_latency_s": (0.0, 1.0),
    "nics_per_gpu": (1, 64),
    "nic_bw_bytes_per_s": (1e6, 1e15),  # 8 Mb/s .. 8 Pb/s per NIC
}

PLAN_BOUNDS: dict[str, Bound] = {
    "tp": (1, 1 << 12),
    "pp": (1, 1 << 12),
    "vpp": (1, 256),
    "ep": (1, 1 << 16),
    "etp": (1, 1 << 12),
    "dp_shard": (1, 1 << 20),
    "dp_replicate": (1, 1 << 20),
    "cp": (1, 1 << 12),
    "seq_len": (1, 1 << 24),
    "micro_batch": (1, 1 << 20),
    "global_batch": (1, 1 << 30),
    "deepep_sms": (1, 1 << 12),
    "routing_seed": (0, (1 << 63) - 1),
    "mtp_layers": (0, 64),  # as MODEL_BOUNDS n_mtp_layers
    "ddp_bucket_params": (0.0, 1e13),
    "expert_capacity_factor": (0.0, 1024.0),
    "ep_rank_capacity_factor": (0.0, 1024.0),
}

ZERO_OR_AT_LEAST: dict[str, float] = {
    "nvlink_bw_bytes_per_s": 1e6,  # a cluster's 0 takes the GPU's NVLink rate
    "fp4_flops": 1e9,  # 0: no FP4 units
    "ddp_bucket_params": 1e6,  # 0: the stack's bucket; a smaller one would cut a model into billions of buckets
    "expert_capacity_factor": 0.01,  # 0: dropless; below a hundredth of a share an expert keeps nothing
    "ep_rank_capacity_factor": 0.01,  # 0: no receive budget
}
"""Float fields where 0 means "none" or "the default": any other value must reach the field's real
minimum (a denormal rate would make every transfer or kernel take forever)."""

MAX_MICROBATCHES = 8192
"""Microbatches per data-parallel rank per step: the simulator's work grows with this count."""

MAX_TOKENS_PER_STEP = 1 << 40
"""Tokens per step (``global_batch * seq_len``): far above any real run, below float trouble."""

MAX_JSON_DEPTH = 64
"""Nesting depth of a JSON input (configs, calibrations, traces); real files use fewer than 10 levels."""


MB = 1_000_000
"""Bytes per megabyte (SI, as the limits below are stated)."""

MAX_INPUT_MB = 64
"""Size of one JSON/TOML input (model, cluster, plan, stack, calibration, scenario, dataset, capacity spec,
HuggingFace ``config.json``, interval file, routing file); the largest shipped one is under 1 MB.
Raise it with ``MOESIM_MAX_INPUT_MB``."""

MAX_TRACE_MB = 256
"""Decompressed size of one Chrome/Kineto trace (``.json`` or ``.json.gz``, inflated in chunks, never past
this bound); parsed, such a trace takes a few GB of memory. Raise it with ``MOESIM_MAX_TRACE_MB``."""

MAX_TRACE_EVENTS = 2_000_000
"""Events in one trace file. Raise it with ``MOESIM_MAX_TRACE_EVENTS``."""

MAX_TRACE_MICROBATCHES = 32
"""Microbatches ``moesim predict --trace-microbatches`` expands to ops (each costs the simulator time and
memory in proportion to the model's ops). Raise it with ``MOESIM_MAX_TRACE_MICROBATCHES``."""

MAX_CAPACITY_POINTS = 50_000
"""Points of one capacity spec (the sum over its sweeps of each cartesian product), counted before any is
built. Raise it with ``MOESIM_MAX_CAPACITY_POINTS``."""

MAX_WORKERS = 64
"""Worker processes of a sweep or plan search (``--workers``)."""

MAX_COMPARE_VARIANTS = 256
"""Variants of one ``moesim compare`` file (each is a whole prediction, ~25 ms to ~1 s). Raise it with
``MOESIM_MAX_COMPARE_VARIANTS``."""

WORKERS_PER_CPU = 4
"""``--workers`` above this many per CPU core is refused (oversubscription only slows a CPU-bound sweep);
``MOESIM_MAX_WORKERS`` sets another ceiling (up to 4096) where a user needs more."""


def env_limit(variable: str, default: int, *, ceiling: int = 1 << 40) -> int:
    """The limit in environment variable ``variable`` (a positive integer up to ``ceiling``), else ``default``.

    >>> env_limit("MOESIM_TEST_UNSET_LIMIT", 7)
    7
    """
    text = os.environ.get(variable)
    if text is None or not text.strip():
        return default
    stripped = text.strip()
    if not stripped.isdigit() or not stripped.isascii() or len(stripped) > 15 or not 1 <= int(stripped) <= ceiling:
        raise ConfigError(f"{variable} must be an integer in 1..{ceiling}, got {text[:30]!r}")
    return int(stripped)


def max_workers() -> int:
    """The largest ``--workers`` allowed here: ``MOESIM_MAX_WORKERS`` if set, else ``WORKERS_PER_CPU`` per
    CPU core, and no more than ``MAX_WORKERS`` (or one per core, where that is more)."""
    cpus = os.cpu_count() or 1
    return env_limit("MOESIM_MAX_WORKERS", min(WORKERS_PER_CPU * cpus, max(MAX_WORKERS, cpus)), ceiling=4096)


def check_workers(flag: str, workers: int) -> int:
    """``workers`` if it is in ``1..max_workers()``, else a :class:`ConfigError` naming ``flag``, the value
    and the limit."""
    limit = max_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= limit:
        raise ConfigError(f"{flag} must be an integer in 1..{limit} ({WORKERS_PER_CPU} per CPU core, "
                          f"{os.cpu_count() or 1} cores here; MOESIM_MAX_WORKERS=<N> raises it), got {workers!r}")
    return workers


def check_finite(owner: str, field: str, value: float) -> None:
    """A :class:`ConfigError` unless ``value`` is a finite number."""
    kind = type(value)
    if kind is int or (kind is float and math.isfinite(value)):  # the common case, without the ABC checks below
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{owner}: {field} must be a number, got {value!r}")
    if not isinstance(value, numbers.Integral) and not math.isfinite(value):  # an int is finite (and may exceed float)
        raise ConfigError(f"{owner}: {field} must be a finite number, got {value!r}")


def check_fields(owner: str, values: Mapping[str, Any], bounds: Mapping[str, Bound]) -> None:
    """Check each ``values[field]`` named in ``bounds``: the right kind of number, finite, in range.

    Integer fields (those whose bounds are ints) must hold ``int``; float fields any finite number.
    """
    for field, (low, high) in bounds.items():
        if field not in values:
            continue
        value = values[field]
        integer = isinstance(low, int) and isinstance(high, int)
        if integer and type(value) is not int and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise ConfigError(f"{owner}: {field} must be an integer, got {value!r}")
        check_finite(owner, field, value)
        if value < low:
            if (low == 1 and integer) or (low == 0 and value == 0):
                raise ConfigError(f"{owner}: {field} must be positive, got {value!r}")
            if low == 0:
                raise ConfigError(f"{owner}: {field} must be zero or positive, got {value!r}")
            raise ConfigError(f"{owner}: {field} must be at least {low:g}, got {value!r}")
        if value > high:
            raise ConfigError(f"{owner}: {field} must be at most {high:g}, got {value!r}"
                              if not integer else f"{owner}: {field} must be at most {high}, got {value!r}")
        floor = ZERO_OR_AT_LEAST.get(field)
        if floor is not None and 0 < value < floor:
            raise ConfigError(f"{owner}: {field} must be 0 or at least {floor:g}, got {value!r}")


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of a parsed JSON value, counting no further than ``limit + 1`` (iterative: no recursion).

    >>> json_depth({"a": [1, {"b": 2}]})
    3
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1 if isinstance(value, (dict, list)) else 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return deepest


_ROUTING_FORMS = ("'balanced', 'round-robin', 'zipf:<s>', 'dirichlet:<alpha>', 'collapse:<k>' or a tokens-per-expert "
                  "file")


def check_routing(routing: str, owner: str = "plan") -> None:
    """Check a routing spec's form before any arithmetic: known names, finite parameters, a readable file.

    A file must be UTF-8 text: whitespace-separated numbers, or (``.json``) a list of numbers, each finite
    and non-negative, not all zero. Its length is checked against the model's experts later
    (:func:`sim.routing.expert_load`).

    >>> check_routing("zipf:1.2")
    >>> check_routing("zipf:nan")
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: plan: routing 'zipf:nan': the parameter must be a finite number, got 'nan'
    """
    if not isinstance(routing, str) or not routing:
        raise ConfigError(f"{owner}: routing must be {_ROUTING_FORMS}, got {routing!r}")
    if routing in ("balanced", "round-robin"):
        return
    if routing.startswith("collapse:"):
        text = routing[len("collapse:"):]
        if not text.isdigit() or not 1 <= int(text) <= PLAN_BOUNDS["ep"][1]:
            raise ConfigError(f"{owner}: routing {routing!r}: expected a whole number of experts (1 to "
                              f"{PLAN_BOUNDS['ep'][1]}) after 'collapse:', got {text!r}")
        return
    for prefix, low, inclusive in (("zipf:", 0.0, True), ("dirichlet:", 0.0, False)):
        if routing.startswith(prefix):
            text = routing[len(prefix):]
            try:
                value = float(text)
            except ValueError:
                raise ConfigError(f"{owner}: routing {routing!r}: expected a number after ':', got {text!r}") from None
            if not math.isfinite(value):
                raise ConfigError(f"{owner}: routing {routing!r}: the parameter must be a finite number, got {text!r}")
            if value < low or (value == low and not inclusive) or value > 1e3:
                bound = "zero or more" if inclusive else "positive"
                raise ConfigError(f"{owner}: routing {routing!r}: the parameter must be {bound} and at most 1000, "
                                  f"got {value:g}")
            return
    # imported here: sim.fileio reads its limits from this module
    from sim.fileio import read_input

    path = Path(routing)
    if not os.path.lexists(path):
        raise ConfigError(f"{owner}: routing {routing!r}: not {_ROUTING_FORMS} (no such file)")
    try:
        text = read_input(path, "tokens-per-expert file").decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{owner}: routing {routing!r}: a tokens-per-expert file must be UTF-8 text "
                          "(numbers), this one is binary") from None
    except ConfigError as err:
        raise ConfigError(f"{owner}: routing {err}") from None
    values: Any
    try:
        if path.suffix == ".json":
            values = json.loads(text)
            if json_depth(values) > 1:
                raise ValueError("expected a flat list of numbers")
        else:
            values = [float(x) for x in text.split()]
    except (ValueError, RecursionError) as err:
        raise ConfigError(f"{owner}: routing {routing!r}: malformed tokens-per-expert file: {err}") from None
    if not isinstance(values, list) or not values:
        raise ConfigError(f"{owner}: routing {routing!r}: expected a non-empty list of tokens-per-expert numbers")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ConfigError(f"{owner}: routing {routing!r}: entry {i} must be a finite non-negative number, "
                              f"got {v!r}")
    if not any(values):
        raise ConfigError(f"{owner}: routing {routing!r}: tokens per expert are all zero")
