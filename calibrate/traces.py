"""Read Kineto / Chrome traces and measure the ops of the shared vocabulary.

A trace is a JSON object with ``traceEvents`` (or a bare list of events). ``torch.profiler`` writes a
``record_function`` range twice: on the host (``cat: user_annotation``) and, on GPUs, the device span of
the kernels it launched (``cat: gpu_user_annotation``). Device spans are what the simulator models, so
they win when present; host spans are the fallback (CPU runs).

>>> events = [{"ph": "X", "name": "moe.dispatch", "cat": "user_annotation", "ts": 0, "dur": 30},
...           {"ph": "X", "name": "moe.dispatch", "cat": "user_annotation", "ts": 50, "dur": 10},
...           {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 0, "dur": 5}]
>>> stats = op_durations(events)
>>> s = stats["moe.dispatch"]; (s.count, round(s.total_s * 1e6), round(s.mean_s * 1e6))
(2, 40, 20)
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.ops import ALL_OPS

__all__ = ["OpStats", "load_trace", "op_durations", "HOST_CATEGORY", "DEVICE_CATEGORY"]

HOST_CATEGORY = "user_annotation"
DEVICE_CATEGORY = "gpu_user_annotation"
MICROSECONDS = 1e-6


@dataclass(frozen=True)
class OpStats:
    """How often an op ran in a trace and for how long, in seconds."""

    name: str
    count: int
    total_s: float
    min_s: float
    max_s: float
    source: str

    @property
    def mean_s(self) -> float:
        return self.total_s / self.count


def load_trace(path: str | Path) -> list[Mapping[str, Any]]:
    """The events of a Chrome/Kineto trace file (``.json`` or ``.json.gz``)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such trace file") from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as err:
        raise ConfigError(f"{path}: not a readable JSON trace: {err}") from None
    events = data.get("traceEvents") if isinstance(data, Mapping) else data
    if not isinstance(events, list):
        raise ConfigError(f"{path}: expected a 'traceEvents' list or a list of events")
    return [event for event in events if isinstance(event, Mapping)]


def op_durations(events: Iterable[Mapping[str, Any]], names: Iterable[str] = ALL_OPS) -> dict[str, OpStats]:
    """Per-op statistics of the complete (``ph == "X"``) ranges named in ``names``.

    Device ranges are used for an op when the trace has any; otherwise its host ranges.
    """
    wanted = set(names)
    spans: dict[tuple[str, str], list[float]] = {}
    for event in events:
        name = event.get("name")
        if event.get("ph") != "X" or name not in wanted:
            continue
        category = event.get("cat", "")
        source = "device" if category == DEVICE_CATEGORY else "host"
        spans.setdefault((name, source), []).append(float(event.get("dur", 0.0)) * MICROSECONDS)
    stats: dict[str, OpStats] = {}
    for name in sorted({name for name, _ in spans}):
        source = "device" if (name, "device") in spans else "host"
        durations = spans[(name, source)]
        stats[name] = OpStats(name, len(durations), sum(durations), min(durations), max(durations), source)
    return stats
