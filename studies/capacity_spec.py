"""Capacity-sweep specs: a strict TOML reader, the built-in default sweep, and the points they expand to.

A spec holds one or more ``[[sweep]]`` tables (each a cartesian product; the points are their union, in
order), an optional ``[search]`` table (the plan space searched at every point: :class:`PlanSpace` fields
``tp pp schedules vpp ep ac micro_batch``) and an optional ``[capacity]`` table::

    [capacity]
    tokens = 14.8e12                  # tokens to train, for time-to-train (default 14.8e12)
    price_per_gpu_hour = {b200 = 6.0} # USD per GPU-hour, one number or per GPU type (optional)
    [[sweep]]
    models = ["deepseek-v3-671b"]     # catalog names (16B .. 671B .. 1T class)
    gpus = ["b200", "gb200"]          # h100 h200 b200 gb200 b300 gb300 (and the rest of the catalog)
    gpu_counts = [256, 1024]          # 8 .. 65,536; multiples of the template's GPUs per node
    nic_gbps = [400, 800]             # per GPU (default: the GPU's cluster template)
    nvlink_domain = ["nvl8", "nvl72"] # or "template" (default)
    oversubscription = [1.0, 2.0]     # leaf uplinks (default 1.0, non-blocking)
    precisions = ["mxfp8"]            # default ["mxfp8"]
    ep_backends = ["deepep"]          # default ["deepep"]
    stacks = ["torchtitan"]           # default ["torchtitan"]
    seq_len = 4096                    # default 4096
    global_batch = 4096               # sequences per step (default 4096)

Unknown keys, empty lists, unknown names and impossible ranges are a :class:`ConfigError` naming the
table, the key and the value.

>>> spec = default_spec()
>>> len(spec.points()) >= 500
True
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sim.catalog import gpu_names, model_names
from sim.errors import ConfigError
from sim.limits import MAX_CAPACITY_POINTS, env_limit
from sim.loaders import read_toml
from sim.specs import EP_BACKENDS, PRECISIONS
from studies._sim import KNOWN_STACKS
from studies.search import PlanSpace

__all__ = ["Point", "CapacitySpec", "load_spec", "default_spec", "spec_from_mapping", "CLUSTER_TEMPLATE",
           "DEFAULT_SEARCH"]

#: The cluster template each GPU type is sized from (sim/catalog/clusters.toml).
CLUSTER_TEMPLATE = {"h100": "hgx-h100", "h200": "hgx-h200", "h800": "h800-deepseek", "b200": "hgx-b200",
                    "b300": "hgx-b300", "gb200": "gb200-nvl72", "gb300": "gb300-nvl72"}
_GPUS_PER_NODE = {"gb200": 4, "gb300": 4}
NVLINK_DOMAINS = {"template": 0, "nvl8": 8, "nvl72": 72}
MAX_GPUS = 65536

#: The plan space of the default sweep: compact, so that 500+ points run in minutes on 2 cores.
DEFAULT_SEARCH = PlanSpace(tp=(1, 2), pp=(1, 2, 4, 8, 16), schedules=("1f1b", "interleaved-1f1b", "dualpipev"),
                           vpp=(2,), ep=(8, 16, 32, 64), ac=("selective", "full"), micro_batch=(1, 2))

_SWEEP_LISTS = {"models": str, "gpus": str, "gpu_counts": int, "nic_gbps": (int, float),
                "nvlink_domain": str, "oversubscription": (int, float), "precisions": str, "ep_backends": str,
                "stacks": str}
_SWEEP_SCALARS = {"seq_len": int, "global_batch": int}
_SEARCH_KEYS = {"tp", "pp", "schedules", "vpp", "ep", "ac", "micro_batch"}


@dataclass(frozen=True)
class Point:
    """One point of a sweep: what is trained, on what, with which precision, EP backend and stack."""

    model: str
    gpu: str
    n_gpus: int
    nic_gbps: float
    nvlink_domain: str
    oversubscription: float
    precision: str
    ep_backend: str
    stack: str
    seq_len: int
    global_batch: int

    @property
    def point_id(self) -> str:
        """A stable id of the point (hash of its fields): the results table's key."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha1(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Sweep:
    models: tuple[str, ...]
    gpus: tuple[str, ...]
    gpu_counts: tuple[int, ...]
    nic_gbps: tuple[float, ...] = (0.0,)
    nvlink_domain: tuple[str, ...] = ("template",)
    oversubscription: tuple[float, ...] = (1.0,)
    precisions: tuple[str, ...] = ("mxfp8",)
    ep_backends: tuple[str, ...] = ("deepep",)
    stacks: tuple[str, ...] = ("torchtitan",)
    seq_len: int = 4096
    global_batch: int = 4096

    def points(self) -> list[Point]:
        return [Point(m, g, n, nic, nvl, ov, pr, be, st, self.seq_len, self.global_batch)
                for m, g, n, nic, nvl, ov, pr, be, st in itertools.product(
                    self.models, self.gpus, self.gpu_counts, self.nic_gbps, self.nvlink_domain,
                    self.oversubscription, self.precisions, self.ep_backends, self.stacks)]


@dataclass(frozen=True)
class CapacitySpec:
    """Sweeps, the plan space searched at every point, tokens to train and GPU prices."""

    sweeps: tuple[Sweep, ...]
    search: PlanSpace = DEFAULT_SEARCH
    tokens: float = 14.8e12
    price_per_gpu_hour: Mapping[str, float] = field(default_factory=dict)
    source: str = "built-in default sweep"

    def points(self) -> list[Point]:
        seen: set[str] = set()
        out = []
        for sweep in self.sweeps:
            for p in sweep.points():
                if p.point_id not in seen:
                    seen.add(p.point_id)
                    out.append(p)
        return out

    def price(self, gpu: str) -> float | None:
        return self.price_per_gpu_hour.get(gpu, self.price_per_gpu_hour.get("*"))

    def space_for(self, point: Point) -> PlanSpace:
        from dataclasses import replace

        return replace(self.search, seq_len=point.seq_len, global_batch=point.global_batch,
                       precision=point.precision, ep_backend=point.ep_backend)


def _list(where: str, key: str, value: Any, kind: Any) -> tuple[Any, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: {key} must be a non-empty list, got {value!r}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, kind):
            raise ConfigError(f"{where}: {key} has a value of the wrong type: {v!r}")
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{where}: {key} must be finite, got {v!r}")
    if len(set(value)) != len(value):
        raise ConfigError(f"{where}: {key} lists a value twice: {value!r}")
    return tuple(value)


def _choices(where: str, key: str, values: tuple[Any, ...], allowed: Any) -> None:
    bad = [v for v in values if v not in allowed]
    if bad:
        raise ConfigError(f"{where}: {key}: unknown {', '.join(map(repr, bad))}; known: {', '.join(map(str, allowed))}")


def _sweep(where: str, data: Any) -> Sweep:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table, got {data!r}")
    unknown = sorted(set(data) - set(_SWEEP_LISTS) - set(_SWEEP_SCALARS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: "
                          f"{', '.join(sorted({*_SWEEP_LISTS, *_SWEEP_SCALARS}))}")
    for key in ("models", "gpus", "gpu_counts"):
        if key not in data:
            raise ConfigError(f"{where}: missing required key {key!r}")
    kw: dict[str, Any] = {k: _list(where, k, data[k], kind) for k, kind in _SWEEP_LISTS.items() if k in data}
    for key in _SWEEP_SCALARS:
        if key in data:
            v = data[key]
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= 1 << 24:
                raise ConfigError(f"{where}: {key} must be an integer in 1..{1 << 24}, got {v!r}")
            kw[key] = v
    _choices(where, "models", kw["models"], model_names())
    _choices(where, "gpus", kw["gpus"], [g for g in gpu_names() if g in CLUSTER_TEMPLATE])
    _choices(where, "precisions", kw.get("precisions", ()), PRECISIONS)
    _choices(where, "ep_backends", kw.get("ep_backends", ()), EP_BACKENDS)
    _choices(where, "stacks", kw.get("stacks", ()), KNOWN_STACKS)
    _choices(where, "nvlink_domain", kw.get("nvlink_domain", ()), list(NVLINK_DOMAINS))
    for n in kw["gpu_counts"]:
        if not 8 <= n <= MAX_GPUS:
            raise ConfigError(f"{where}: gpu_counts must be in 8..{MAX_GPUS}, got {n}")
        for g in kw["gpus"]:
            per_node = _GPUS_PER_NODE.get(g, 8)
            if n % per_node:
                raise ConfigError(f"{where}: gpu_counts {n} is not a multiple of the {per_node} GPUs per node of {g}")
    for nic in kw.get("nic_gbps", ()):
        if not 1 <= nic <= 1e5:
            raise ConfigError(f"{where}: nic_gbps must be in 1..100000 Gb/s, got {nic}")
    for ov in kw.get("oversubscription", ()):
        if not 1 <= ov <= 64:
            raise ConfigError(f"{where}: oversubscription must be in 1..64, got {ov}")
    if "nic_gbps" in kw:
        kw["nic_gbps"] = tuple(float(x) for x in kw["nic_gbps"])
    if "oversubscription" in kw:
        kw["oversubscription"] = tuple(float(x) for x in kw["oversubscription"])
    return Sweep(**kw)


def spec_from_mapping(data: Mapping[str, Any], where: str = "spec") -> CapacitySpec:
    """A :class:`CapacitySpec` from parsed TOML (see the module docstring for the format)."""
    unknown = sorted(set(data) - {"sweep", "search", "capacity"})
    if unknown:
        raise ConfigError(f"{where}: unknown table(s) {', '.join(unknown)}; allowed: capacity, search, sweep")
    sweeps = data.get("sweep")
    if not isinstance(sweeps, list) or not sweeps:
        raise ConfigError(f"{where}: needs at least one [[sweep]] table")
    parsed = tuple(_sweep(f"{where}: [[sweep]] #{i + 1}", s) for i, s in enumerate(sweeps))
    limit = env_limit("MOESIM_MAX_CAPACITY_POINTS", MAX_CAPACITY_POINTS)
    count = sum(math.prod(len(v) for v in (s.models, s.gpus, s.gpu_counts, s.nic_gbps, s.nvlink_domain,
                                            s.oversubscription, s.precisions, s.ep_backends, s.stacks))
                for s in parsed)  # counted before any point is built (duplicates across sweeps included)
    if count > limit:
        raise ConfigError(f"{where}: the sweeps expand to {count} points, more than the limit of {limit} "
                          "(MOESIM_MAX_CAPACITY_POINTS=<N> raises it)")
    search = DEFAULT_SEARCH
    if "search" in data:
        table = data["search"]
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: [search] must be a table")
        bad = sorted(set(table) - _SEARCH_KEYS)
        if bad:
            raise ConfigError(f"{where}: [search]: unknown key(s) {', '.join(bad)}; allowed: {', '.join(sorted(_SEARCH_KEYS))}")
        fields: dict[str, Any] = {}
        for key, value in table.items():
            kind = str if key in ("schedules", "ac") else int
            fields[key] = _list(f"{where}: [search]", key, value, kind)
        from dataclasses import replace

        try:
            search = replace(DEFAULT_SEARCH, **fields)
        except ConfigError as err:
            raise ConfigError(f"{where}: [search]: {err}") from None
    cap = data.get("capacity", {})
    if not isinstance(cap, dict):
        raise ConfigError(f"{where}: [capacity] must be a table")
    bad = sorted(set(cap) - {"tokens", "price_per_gpu_hour"})
    if bad:
        raise ConfigError(f"{where}: [capacity]: unknown key(s) {', '.join(bad)}; allowed: price_per_gpu_hour, tokens")
    tokens = cap.get("tokens", 14.8e12)
    if isinstance(tokens, bool) or not isinstance(tokens, int | float) or not 1e6 <= tokens <= 1e16:
        raise ConfigError(f"{where}: [capacity] tokens must be a number in 1e6..1e16, got {tokens!r}")
    prices = cap.get("price_per_gpu_hour", {})
    if isinstance(prices, int | float) and not isinstance(prices, bool):
        prices = {"*": prices}
    if not isinstance(prices, dict):
        raise ConfigError(f"{where}: [capacity] price_per_gpu_hour must be a number or a table of GPU -> USD")
    for g, v in prices.items():
        if g != "*" and g not in CLUSTER_TEMPLATE:
            raise ConfigError(f"{where}: [capacity] price_per_gpu_hour: unknown GPU {g!r}")
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < 1e4:
            raise ConfigError(f"{where}: [capacity] price_per_gpu_hour.{g} must be in (0, 10000) USD, got {v!r}")
    return CapacitySpec(parsed, search, float(tokens), {k: float(v) for k, v in prices.items()}, where)


def load_spec(path: str | Path) -> CapacitySpec:
    """Read a capacity spec TOML."""
    return spec_from_mapping(read_toml(path), str(path))


def default_spec() -> CapacitySpec:
    """The built-in sweep (506 points): 16B, 236B, 671B and 1T-class (Kimi-K2) models over the six current
    GPU types, 64 to 16,384 GPUs, 400 vs 800 Gb/s NICs, BF16 vs MXFP8, and fabric studies (NVL8 vs NVL72,
    oversubscription 1 vs 2, NCCL vs DeepEP) of DeepSeek-V3 16B and 671B. 4,096 sequences per step up to
    2,048 GPUs; from 4,096 GPUs on 8,192 sequences. The costliest points (Kimi-K2, 236B, 4,096+ GPUs) take
    800 Gb/s NICs and each GPU's fastest precision only, so the sweep runs in minutes on 2 cores."""
    all_gpus = ["h100", "h200", "b200", "gb200", "b300", "gb300"]
    common = {"gpus": all_gpus, "nic_gbps": [400, 800], "precisions": ["bf16", "mxfp8"]}
    big = 8192  # sequences per step from 4,096 GPUs on (4,096 sequences leave no valid plan at 16,384 GPUs)
    large = {"gpu_counts": [4096, 8192, 16384], "global_batch": big, "nic_gbps": [800]}
    fastest = [{"gpus": ["h100", "h200"], "precisions": ["bf16"]},  # each GPU type at its fastest precision
               {"gpus": ["b200", "gb200", "b300", "gb300"], "precisions": ["mxfp8"]}]
    fabric = {"nvlink_domain": ["nvl8", "nvl72"], "oversubscription": [1.0, 2.0], "ep_backends": ["nccl", "deepep"]}
    data = {
        "sweep": [
            {"models": ["deepseek-v3-16b"], "gpu_counts": [64, 128, 256, 512, 1024, 2048], **common},
            {"models": ["deepseek-v3-16b"], "gpus": ["b200", "gb200", "h200"], "gpu_counts": [64, 128, 256, 512, 1024],
             **fabric},
            {"models": ["deepseek-v2-236b"], "gpu_counts": [128, 256, 512, 1024, 2048], "nic_gbps": [800],
             "gpus": all_gpus, "precisions": ["bf16", "mxfp8"]},
            {"models": ["deepseek-v3-671b"], "gpu_counts": [256, 512, 1024, 2048], **common},
            *({"models": ["kimi-k2"], "gpu_counts": [512, 1024, 2048], "nic_gbps": [800], **f} for f in fastest),
            *({"models": ["deepseek-v3-671b", "kimi-k2"], **f, **large} for f in fastest),
            {"models": ["deepseek-v3-671b"], "gpus": ["b200"], "gpu_counts": [256, 512, 1024, 2048], **fabric},
        ],
        "capacity": {"tokens": 14.8e12},
    }
    spec = spec_from_mapping(data, "built-in default sweep")
    return spec
