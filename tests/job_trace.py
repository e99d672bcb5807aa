"""Small DeepSeek-style job traces for calibrate's trace readers (``calibrate.rules.read_job_trace``)."""

from __future__ import annotations

from typing import Any

#: A DeepEP internode dispatch kernel's name as the H800 trace records it.
DEEPEP_DISPATCH = "void dpsk::ep::internode::dispatch<false, 8, false, 8>(int4*)"


def job_events(*kernels: tuple[Any, ...], stream: int = 20) -> list[dict[str, Any]]:
    """Profiler events of ``kernels`` (phase annotation, kernel name, start us, duration us, grid or None, and
    optionally the kernel's own stream, else ``stream``): each kernel runs inside its own phase annotation and
    is linked to its launch by a correlation id."""
    events: list[dict[str, Any]] = []
    for corr, (phase, name, ts, dur, grid, *own) in enumerate(kernels, start=1):
        on = own[0] if own else stream
        events.append({"ph": "X", "cat": "user_annotation", "name": phase, "pid": 0, "tid": 0,
                       "ts": ts - 10.0, "dur": dur + 20.0})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, "tid": 0,
                       "ts": ts - 5.0, "dur": 1.0, "args": {"correlation": corr}})
        kernel_args: dict[str, Any] = {"correlation": corr, "stream": on}
        if grid is not None:
            kernel_args["grid"] = grid
        events.append({"ph": "X", "cat": "kernel", "pid": 0, "tid": on, "ts": ts, "dur": dur, "name": name,
                       "args": kernel_args})
    return events
