"""Training steps of a Kineto trace: ``torch.profiler``'s ``schedule(active=N)`` records N ``ProfilerStep#k``.

A multi-step trace is split step by step before the kernel-name rules read it (:func:`read_steps`): each
host event belongs to the step whose ``ProfilerStep#k`` span holds it, and each GPU kernel to the step
whose runtime call launched it (the latest step at or before the kernel that holds its correlation id, so
a trace whose ids restart every step is read right too). Each chosen step is read on its own
(:func:`calibrate.rules.read_job_trace`), then the steps are joined back to back: layers numbered on
(step 2's first layer follows step 1's last), times shifted so the idle time between steps is not part
of any window. Fits over the joined reading take medians over every chosen step (the steps averaged).

Which steps (``step``): ``None`` (the default) every complete step, leaving the first out when there are
more than two (it often carries one-off work); ``"all"`` every complete step; ``k`` the step named
``ProfilerStep#k``. A step is complete when it has kernels and as many phase annotations of each name
as the fullest step (a capture stopped mid-step has fewer).

>>> steps = profiler_steps([{"ph": "X", "name": "ProfilerStep#3", "ts": 0, "dur": 10},
...                         {"ph": "X", "name": "ProfilerStep#4", "ts": 12, "dur": 10}])
>>> [(s.number, s.start_us, s.end_us) for s in steps]
[(3, 0.0, 10.0), (4, 12.0, 22.0)]
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from calibrate.rules import PHASE_RE, RunShapes, TraceReading, read_job_trace
from sim.errors import ConfigError

__all__ = ["ProfilerStep", "parse_step", "profiler_steps", "read_steps", "split_steps"]

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


@dataclass(frozen=True)
class ProfilerStep:
    """One ``ProfilerStep#k`` host span, in the trace's microseconds."""

    number: int
    start_us: float
    end_us: float


def parse_step(text: str | None) -> int | str | None:
    """``--step``'s value: None (default), ``"all"``, or a step number."""
    if text is None or text == "all":
        return text
    if not text.isdigit():
        raise ConfigError(f"--step must be all or a ProfilerStep number (the k of ProfilerStep#k), got {text!r}")
    return int(text)


def profiler_steps(events: Sequence[Mapping[str, Any]]) -> list[ProfilerStep]:
    """The trace's ``ProfilerStep#k`` spans, in time order (one per number: the first if repeated)."""
    steps: dict[int, ProfilerStep] = {}
    for e in events:
        match = _STEP_RE.match(str(e.get("name", ""))) if e.get("ph") == "X" else None
        if match and e.get("cat") not in _DEVICE_CATS:
            number = int(match.group(1))
            ts = float(e["ts"])
            steps.setdefault(number, ProfilerStep(number, ts, ts + float(e["dur"])))
    return sorted(steps.values(), key=lambda s: s.start_us)


def split_steps(events: Sequence[Mapping[str, Any]],
                steps: Sequence[ProfilerStep]) -> list[list[Mapping[str, Any]]]:
    """The events of each step (see the module docstring); events outside every step are left out."""
    starts = [s.start_us for s in steps]
    out: list[list[Mapping[str, Any]]] = [[] for _ in steps]
    launches: list[set[Any]] = [set() for _ in steps]
    device: list[Mapping[str, Any]] = []

    def holding(ts: float) -> int:
        i = bisect_right(starts, ts) - 1
        return i if i >= 0 and ts <= steps[i].end_us else -1

    for e in events:
        if e.get("ph") != "X":
            continue
        if e.get("cat") in _DEVICE_CATS:
            device.append(e)
            continue
        i = holding(float(e["ts"]))
        if i < 0:
            continue
        out[i].append(e)
        corr = (e.get("args") or {}).get("correlation")
        if corr is not None and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            launches[i].add(corr)
    for e in device:
        ts = float(e["ts"])
        last = bisect_right(starts, ts) - 1  # the GPU runs a kernel after its launch: in its step or a later one
        corr = (e.get("args") or {}).get("correlation")
        owner = next((i for i in range(last, -1, -1) if corr is not None and corr in launches[i]), -1)
        if owner < 0 and last >= 0:
            owner = last
        if owner >= 0:
            out[owner].append(e)
    return out


def _complete(parts: Sequence[Sequence[Mapping[str, Any]]]) -> list[bool]:
    counts = [Counter(str(e.get("name")) for e in part if e.get("cat") == "user_annotation"
                      and PHASE_RE.match(str(e.get("name", "")))) for part in parts]
    fullest: Counter[str] = Counter()
    for c in counts:
        for name, n in c.items():
            fullest[name] = max(fullest[name], n)
    return [bool(c) and c == fullest and any(e.get("cat") == "kernel" for e in part)
            for c, part in zip(counts, parts)]


def _join(readings: Sequence[TraceReading]) -> TraceReading:
    """Readings of consecutive steps as one: layers numbered on, each step's times following the last's."""
    kernels, samples, notes = [], [], []
    layer_base, clock = 0, 0.0
    for r in readings:
        t0 = min(k.start_s for k in r.kernels)
        shift = clock - t0

        def layer(n: int, base: int = layer_base) -> int:
            return n + base if n >= 0 else n

        kernels += [replace(k, start_s=k.start_s + shift, layer=layer(k.layer)) for k in r.kernels]
        samples += [replace(s, start_s=s.start_s + shift, layer=layer(s.layer)) for s in r.samples]
        notes += [n for n in r.notes if n not in notes]
        layer_base += max((k.layer for k in r.kernels), default=-1) + 1
        clock += r.window_s
    first = readings[0]
    return TraceReading(kernels, samples, first.device, first.num_sms, clock, notes, first.shapes)


def read_steps(events: Sequence[Mapping[str, Any]], shapes: RunShapes | None = None,
               step: int | str | None = None, *, source: str = "the trace") -> TraceReading:
    """Read a job trace step by step (see the module docstring); the reading's notes say which steps."""
    steps = profiler_steps(events)
    if len(steps) <= 1 and (step is None or step == "all" or (steps and steps[0].number == step)):
        return read_job_trace(events, shapes)  # one step (or none marked): the whole trace
    names = ", ".join(f"#{s.number}" for s in steps) or "none"
    if isinstance(step, int) and step not in {s.number for s in steps}:
        raise ConfigError(f"--step {step}: {source} has no ProfilerStep#{step} (its steps: {names})")
    parts = split_steps(events, steps)
    complete = _complete(parts)
    if isinstance(step, int):
        chosen = [i for i, s in enumerate(steps) if s.number == step]
        how = f"ProfilerStep#{step} (--step {step}) of {len(steps)} steps ({names})"
    else:
        chosen = [i for i, ok in enumerate(complete) if ok]
        if not chosen:
            raise ConfigError(f"{source}: none of its {len(steps)} ProfilerStep spans ({names}) holds a complete "
                              "step (kernels and every phase annotation); pick one with --step N")
        dropped = ""
        if step is None and len(chosen) > 2:
            dropped = f", the first (#{steps[chosen[0]].number}) left out"
            chosen = chosen[1:]
        incomplete = [f"#{s.number}" for s, ok in zip(steps, complete) if not ok]
        how = (f"average of {len(chosen)} complete steps ({', '.join(f'#{steps[i].number}' for i in chosen)}"
               f"{dropped}) of {len(steps)} ({names})"
               + (f"; incomplete, not used: {', '.join(incomplete)}" if incomplete else ""))
    readings = [read_job_trace(parts[i], shapes) for i in chosen]
    readings = [r for r in readings if r.kernels]
    if not readings:
        raise ConfigError(f"{source}: the chosen step(s) hold no GPU kernels ({how})")
    joined = _join(readings)
    joined.notes.insert(0, f"steps: {how}")
    return joined
