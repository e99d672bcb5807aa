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
import sys
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.fileio import read_trace
from sim.limits import MAX_TRACE_EVENTS, env_limit
from sim.ops import ALL_OPS

__all__ = ["OpStats", "load_trace", "load_document", "op_durations", "HOST_CATEGORY", "DEVICE_CATEGORY"]

HOST_CATEGORY = "user_annotation"
DEVICE_CATEGORY = "gpu_user_annotation"
MICROSECONDS = 1e-6
#: The longest complete event a profiler trace can hold, in its microseconds: a year. A longer ``dur`` is a corrupt
#: or hand-made file, and durations near the float limit would turn every rate fitted from them into zero.
MAX_EVENT_US = 365 * 86400 * 1e6


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


def _reject_constant(token: str) -> float:
    raise ValueError(f"{token} is not a number JSON allows")


def _check_event(path: Path, index: int, event: Mapping[str, Any]) -> None:
    name = event.get("name")
    if "name" in event and not isinstance(name, str):
        raise ConfigError(f"{path}: traceEvents[{index}].name must be a string, got {type(name).__name__} "
                          f"{repr(name)[:40]}")
    if event.get("ph") != "X":
        return
    for key in ("ts", "dur"):
        value = event.get(key)
        if value is None:
            raise ConfigError(f"{path}: traceEvents[{index}] ({name!r}): missing {key}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not abs(value) <= sys.float_info.max:
            raise ConfigError(f"{path}: traceEvents[{index}] ({name!r}): {key} must be a finite number, "
                              f"got {repr(value)[:40]}")
    if event["dur"] < 0:
        raise ConfigError(f"{path}: traceEvents[{index}] ({name!r}): negative duration {event['dur']!r}")
    if event["dur"] > MAX_EVENT_US:
        raise ConfigError(f"{path}: traceEvents[{index}] ({name!r}): duration {event['dur']!r} us is longer than a "
                          "year; not a profiler trace")
    if event["ts"] < 0:
        raise ConfigError(f"{path}: traceEvents[{index}] ({name!r}): negative timestamp ts {event['ts']!r}")
    args = event.get("args")
    if args is not None and not isinstance(args, Mapping):
        raise ConfigError(f"{path}: traceEvents[{index}] ({name!r}): args must be an object, got {repr(args)[:40]}")
    if args is not None and isinstance(args.get("correlation"), list | Mapping):
        raise ConfigError(f"{path}: traceEvents[{index}] ({name!r}): args.correlation must be a number, got "
                          f"{repr(args['correlation'])[:40]}")


def load_document(path: str | Path) -> tuple[list[Mapping[str, Any]], dict[str, Any]]:
    """The validated events of a trace file and its top-level metadata (``deviceProperties``,
    ``distributedInfo``, ...: every key but ``traceEvents``; empty for a bare list)."""
    events = load_trace(path)
    return events, dict(_LAST_META.pop(str(Path(path)), {}))


_LAST_META: dict[str, dict[str, Any]] = {}


def load_trace(path: str | Path) -> list[Mapping[str, Any]]:
    """The events of a Chrome/Kineto trace file (``.json`` or ``.json.gz``), validated.

    Complete events (``ph == "X"``) must carry finite, non-negative ``ts``/``dur`` (``dur`` at most
    :data:`MAX_EVENT_US`); names must be strings.
    Anything else raises :class:`~sim.errors.ConfigError` naming the event, the field and the value.
    """
    path = Path(path)
    raw = read_trace(path)  # a regular file; gzip inflated in chunks up to sim.limits.MAX_TRACE_MB
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such trace file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a trace file") from None
    except RecursionError:
        raise ConfigError(f"{path}: not a readable JSON trace: nested too deeply") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise ConfigError(f"{path}: truncated or corrupt gzip: {err or type(err).__name__}") from None
    except (ValueError, UnicodeDecodeError, OSError) as err:
        raise ConfigError(f"{path}: not a readable JSON trace: {err}") from None
    events = data.get("traceEvents") if isinstance(data, Mapping) else data
    if not isinstance(events, list):
        raise ConfigError(f"{path}: expected a 'traceEvents' list or a list of events")
    max_events = env_limit("MOESIM_MAX_TRACE_EVENTS", MAX_TRACE_EVENTS)
    if len(events) > max_events:
        raise ConfigError(f"{path}: {len(events)} events, more than the limit of {max_events} "
                          "(MOESIM_MAX_TRACE_EVENTS raises it)")
    if isinstance(data, Mapping):
        _LAST_META[str(path)] = {k: v for k, v in data.items() if k != "traceEvents"}
    kept = []
    for index, event in enumerate(events):
        if not isinstance(event, Mapping):
            raise ConfigError(f"{path}: traceEvents[{index}] must be an object, got {repr(event)[:40]}")
        _check_event(path, index, event)
        kept.append(event)
    return kept


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
