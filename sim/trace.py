"""Chrome trace (Perfetto / chrome://tracing) of a prediction's representative ranks.

One process per pipeline rank (the symmetry class that stands for all its peers), one thread per stream
(``compute``, ``comm``, FSDP streams) plus a ``pipeline`` thread with one slice per chunk action. Op slices
carry the shared vocabulary (:mod:`sim.ops`) as names and ``phase`` (fwd/bwd/recompute), microbatch and
layer as arguments, so a measured trace and a simulated one line up by name. The first
``detail_microbatches`` microbatches are expanded to ops; the rest show as chunk and layer slices
(a full 671B step has millions of kernels).

>>> from sim.catalog import load_model, load_cluster
>>> from sim.predict import predict
>>> from sim.specs import ParallelPlan
>>> p = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
...             ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512))
>>> events = chrome_trace_events(p)
>>> any(e["name"] == "moe.dispatch" for e in events)
True
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.fileio import write_atomic
from sim.predict import Prediction

__all__ = ["chrome_trace_events", "write_chrome_trace"]

_US = 1e6


def chrome_trace_events(pred: Prediction, *, detail_microbatches: int = 2, pid_base: int = 0) -> list[dict[str, Any]]:
    """Trace events (``ph: X`` slices, microseconds) of ``pred``."""
    data = pred.trace_data
    if data is None:
        return []
    pipe, chunks, layers = data["pipeline"], data["chunks"], data["layers"]
    events: list[dict[str, Any]] = []
    tids: dict[tuple[int, str], int] = {}

    def tid(pid: int, stream: str) -> int:
        key = (pid, stream)
        if key not in tids:
            tids[key] = len([k for k in tids if k[0] == pid]) + 1
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tids[key], "args": {"name": stream}})
        return tids[key]

    for rank, actions in enumerate(pipe.actions):
        pid = pid_base + rank
        events.append({"ph": "M", "name": "process_name", "pid": pid,
                       "args": {"name": f"{pred.name}: pp rank {rank} (representative)"}})
        for phase, stage, mb, start, end in actions:
            events.append({"ph": "X", "name": f"{phase} chunk {stage} mb {mb}", "cat": "pipeline", "pid": pid,
                           "tid": tid(pid, "pipeline"), "ts": start * _US, "dur": (end - start) * _US,
                           "args": {"stage": stage, "microbatch": mb}})
            # Op detail for plain forward and backward chunks only: a deferred weight-gradient step (W) and an
            # overlapped DualPipe pair (FB) have no single-layer timeline of their own.
            if mb >= detail_microbatches or phase not in ("F", "B"):
                continue
            ph = "fwd" if phase == "F" else "bwd"
            t = start
            kinds = chunks[stage].layers if ph == "fwd" else list(reversed(chunks[stage].layers))
            for li, kind in enumerate(kinds):
                res = layers[(kind, ph)]
                events.append({"ph": "X", "name": f"layer {kind}", "cat": "layer", "pid": pid,
                               "tid": tid(pid, "layers"), "ts": t * _US, "dur": res.time_s * _US,
                               "args": {"phase": ph, "microbatch": mb, "layer": li}})
                for name, stream, op_phase, s, e in res.log:
                    events.append({"ph": "X", "name": name, "cat": stream, "pid": pid,
                                   "tid": tid(pid, stream), "ts": (t + s) * _US, "dur": (e - s) * _US,
                                   "args": {"phase": op_phase, "microbatch": mb, "layer": li}})
                t += res.time_s
    return events


def write_chrome_trace(preds: list[Prediction], path: str | Path, *, detail_microbatches: int = 2) -> None:
    """Write the traces of ``preds`` (one process group per prediction) to ``path`` as JSON."""
    events: list[dict[str, Any]] = []
    for i, pred in enumerate(preds):
        events += chrome_trace_events(pred, detail_microbatches=detail_microbatches, pid_base=100 * i)
    write_atomic(Path(path), json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
