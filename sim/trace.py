"""Chrome trace (Perfetto / chrome://tracing) of a prediction's representative ranks.

One process per pipeline rank (the symmetry class that stands for all its peers), one thread per stream
(``compute``, ``comm``, FSDP streams; overlapped F&B pairs show both microbatches' ops on them, so what
hides behind what is visible) plus a ``pipeline`` thread with one slice per chunk action. Op slices
carry the shared vocabulary (:mod:`sim.ops`) as names and ``phase`` (fwd/bwd/recompute), microbatch and
layer as arguments (communication slices also ``bytes``, ``link``, ``achieved_gbps``, ``link_bytes``, ``link_gbps``
and ``bound_by``:
:func:`comm_args`), so a measured trace and a simulated one line up by name. A window of microbatches is
expanded to ops (:func:`default_window`: the first microbatch and a steady-state one, so that DualPipe's
and combined 1F1B's overlapped pairs are shown); the rest show as chunk slices (a full 671B step has
millions of kernels). :func:`trace_hidden_share` measures, from the events alone, how much of the
communication runs under compute; :func:`predicted_hidden_share` is the simulator's figure for that window.

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sim import ops
from sim.errors import ConfigError
from sim.fileio import write_atomic
from sim.predict import Prediction

__all__ = ["chrome_trace_events", "comm_args", "comm_under_compute", "union_intervals", "write_chrome_trace", "default_window", "check_window",
           "predicted_hidden_share", "trace_hidden_share"]

_US = 1e6
_THREAD_NAMES = {"pipeline": "pipeline (schedule actions: chunk, microbatch)",
                 "layers": "layers (one slice per layer of an expanded chunk)"}


def default_window(pred: Prediction) -> tuple[int, ...]:
    """The microbatches a trace expands by default: the first (warm-up) and the steady state. With overlapped
    F&B pairs (DualPipe(V), Megatron's combined 1F1B) the steady state is the forward microbatches of the two
    middle pairs on pipeline rank 0 (in DualPipe one of each direction); else (1F1B, interleaved) the
    middle microbatch.

    >>> from sim.catalog import load_model, load_cluster
    >>> from sim.predict import predict
    >>> from sim.specs import ParallelPlan
    >>> default_window(predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
    ...                        ParallelPlan(ep=4, dp_shard=8, global_batch=64, seq_len=256)))
    (0, 4)
    """
    data = pred.trace_data
    if data is None:
        return (0,)
    actions = data["pipeline"].actions
    fb = list(dict.fromkeys(mb for phase, _st, mb, _s, _e in (actions[0] if actions else []) if phase == "FB"))
    if fb:
        mid = max(0, len(fb) // 2 - 1)
        return tuple(sorted({0, *fb[mid:mid + 2]}))
    return tuple(sorted({0, data["plan"].n_microbatches // 2}))


def check_window(pred: Prediction, microbatches: Sequence[int]) -> tuple[int, ...]:
    """``microbatches`` checked against the step's count (a :class:`ConfigError` naming the bad value)."""
    n = pred.trace_data["plan"].n_microbatches if pred.trace_data is not None else 0
    for mb in microbatches:
        if isinstance(mb, bool) or not isinstance(mb, int) or not 0 <= mb < n:
            raise ConfigError(f"--trace-microbatches: microbatch {mb!r} is not in 0..{n - 1} "
                              f"({pred.name} runs {n} microbatches per step)")
    return tuple(sorted(set(microbatches)))


def _window(pred: Prediction, microbatches: Sequence[int] | None, detail_microbatches: int | None) -> set[int]:
    if microbatches is not None:
        return set(microbatches)
    if detail_microbatches is not None:
        return set(range(detail_microbatches))
    return set(default_window(pred))


def _represents(pred: Prediction, rank: int, pp: int) -> str:
    peers = pred.n_gpus // max(1, pp)
    return (f"{pred.name}: pp rank {rank} of {pp} (representative GPU: stands for the {peers} GPUs of pipeline "
            f"stage {rank}, ranks with the same work simulated once)")


def comm_args(pred: Prediction, name: str, dur_s: float) -> dict[str, Any]:
    """Trace arguments of one communication slice ``name`` lasting ``dur_s``: the bytes one op of its kind
    sends and of those the bytes that cross its link (the step's means, ``Prediction.comm``), the link class,
    the rates over this slice and what bounds the kind; empty for ops that are not communication."""
    entry = pred.comm.get(name)
    if not entry or not entry.get("ops_per_step"):
        return {}
    nbytes = entry["bytes_per_step"] / entry["ops_per_step"]
    crossing = entry["link_bytes_per_step"] / entry["ops_per_step"]
    return {"bytes": nbytes, "link": entry["link"], "bound_by": entry["bound_by"],
            "achieved_gbps": nbytes / dur_s / 1e9 if dur_s > 0 else 0.0,
            "link_bytes": crossing, "link_gbps": crossing / dur_s / 1e9 if dur_s > 0 else 0.0}


def chrome_trace_events(pred: Prediction, *, detail_microbatches: int | None = None,
                        microbatches: Sequence[int] | None = None, pid_base: int = 0) -> list[dict[str, Any]]:
    """Trace events (``ph: X`` slices, microseconds) of ``pred``; ops expanded for ``microbatches`` (default:
    :func:`default_window`), or for the first ``detail_microbatches``."""
    data = pred.trace_data
    if data is None:
        return []
    window = _window(pred, microbatches, detail_microbatches)
    pipe, chunks, layers = data["pipeline"], data["chunks"], data["layers"]
    events: list[dict[str, Any]] = []
    tids: dict[tuple[int, str], int] = {}

    def tid(pid: int, stream: str) -> int:
        key = (pid, stream)
        if key not in tids:
            tids[key] = len([k for k in tids if k[0] == pid]) + 1
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tids[key],
                           "args": {"name": _THREAD_NAMES.get(stream, f"{stream} stream")}})
        return tids[key]

    pp = len(pipe.actions)
    for rank, actions in enumerate(pipe.actions):
        pid = pid_base + rank
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": _represents(pred, rank, pp)}})
        for idx, (phase, stage, mb, start, end) in enumerate(actions):
            events.append({"ph": "X", "name": f"{phase} chunk {stage} mb {mb}", "cat": "pipeline", "pid": pid,
                           "tid": tid(pid, "pipeline"), "ts": start * _US, "dur": (end - start) * _US,
                           "args": {"stage": stage, "microbatch": mb}})
            if mb not in window or phase not in ("F", "B", "FB"):
                continue
            if phase == "FB":  # an overlapped pair: both microbatches' ops on the compute and comm streams
                res = data["pairs"][pipe.pair_stages[(rank, idx)]]
                for name, stream, op_phase, s, e in pair_log(res):
                    events.append({"ph": "X", "name": name, "cat": stream, "pid": pid,
                                   "tid": tid(pid, stream), "ts": (start + s) * _US, "dur": (e - s) * _US,
                                   "args": {"phase": op_phase, "pair": f"F mb {mb} + B",
                                            **comm_args(pred, name, e - s)}})
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
                                   "args": {"phase": op_phase, "microbatch": mb, "layer": li,
                                            **comm_args(pred, name, e - s)}})
                t += res.time_s
    return events


def pair_log(res: Any) -> list[tuple[str, str, str, float, float]]:
    """The ops of an overlapped pair as laid out in its whole span. A pair the simulator compressed (a run
    of identical layer pairs simulated as three, then extended by ``repeat`` periods: ``SimResult.repeat``)
    is replayed the same way: the ops that start in the period before the middle of the simulated span are
    repeated ``repeat`` times, and the ops after it shifted by ``repeat`` periods."""
    log: list[tuple[str, str, str, float, float]] = res.log
    if not getattr(res, "repeat", 0) or res.period_s <= 0:
        return log
    span = max((e for *_x, e in log), default=0.0)
    cut, period, k = span / 2, res.period_s, res.repeat
    out = [op for op in log if op[3] < cut]
    window = [op for op in log if cut - period <= op[3] < cut]
    for i in range(1, k + 1):
        out += [(n, st, ph, s + i * period, e + i * period) for n, st, ph, s, e in window]
    out += [(n, st, ph, s + k * period, e + k * period) for n, st, ph, s, e in log if s >= cut]
    return out


def _simulated_results(pred: Prediction, window: set[int]) -> list[Any]:
    """The simulated layers and pairs the trace expands for ``window`` (one per expanded layer or pair)."""
    data = pred.trace_data
    pipe, chunks, layers = data["pipeline"], data["chunks"], data["layers"]
    out = []
    for rank, actions in enumerate(pipe.actions):
        for idx, (phase, stage, mb, _s, _e) in enumerate(actions):
            if mb not in window or phase not in ("F", "B", "FB"):
                continue
            if phase == "FB":
                out.append(data["pairs"][pipe.pair_stages[(rank, idx)]])
            else:
                ph = "fwd" if phase == "F" else "bwd"
                out += [layers[(kind, ph)] for kind in chunks[stage].layers]
    return out


def _is_compute(name: str, stream: str) -> bool:
    return stream == "compute" and name != ops.A2A_HOST_SYNC


def predicted_hidden_share(pred: Prediction, microbatches: Sequence[int] | None = None) -> float:
    """The share of communication the prediction hides under compute in the expanded window: hidden
    communication seconds / (hidden + exposed communication and host-sync seconds) of the simulated layers
    and pairs the trace expands, as the simulator accounts them (``SimResult.hidden_s`` and ``exposed_s``,
    :func:`sim.predict.layers.summarize`)."""
    hidden = exposed = 0.0
    for res in _simulated_results(pred, _window(pred, microbatches, None)):
        hidden += sum(res.hidden_s.values())
        exposed += sum(v for k, v in res.exposed_s.items() if k != "comm.wait")
    return hidden / (hidden + exposed) if hidden + exposed > 0 else 0.0


def union_intervals(iv: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """``(start, end)`` intervals merged where they overlap, sorted; empty ones dropped."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        elif e > s:
            out.append((s, e))
    return out


def comm_under_compute(comp: Sequence[tuple[float, float]], other: Sequence[tuple[float, float]]
                       ) -> tuple[float, float]:
    """(seconds some communication runs under compute, seconds it runs with no compute).

    >>> comm_under_compute([(0.0, 2.0)], [(1.0, 3.0), (1.5, 2.5)])
    (1.0, 1.0)
    """
    c, o = union_intervals(comp), union_intervals(other)
    under = 0.0
    for s, e in o:
        for cs, ce in c:
            if ce <= s:
                continue
            if cs >= e:
                break
            under += min(e, ce) - max(s, cs)
    total = sum(e - s for s, e in o)
    return under, total - under


def trace_hidden_share(events: Sequence[dict[str, Any]]) -> float:
    """From trace events alone: the share of communication time (op slices on non-compute streams, and host
    syncs) that runs while the same process computes, over all processes."""
    hidden = exposed = 0.0
    for pid in sorted({e["pid"] for e in events}):
        slices = [e for e in events if e["pid"] == pid and e.get("ph") == "X"
                  and e.get("cat") not in ("pipeline", "layer")]
        comp = [(e["ts"], e["ts"] + e["dur"]) for e in slices if _is_compute(e["name"], e["cat"])]
        other = [(e["ts"], e["ts"] + e["dur"]) for e in slices if not _is_compute(e["name"], e["cat"])]
        h, x = comm_under_compute(comp, other)
        hidden += h
        exposed += x
    return hidden / (hidden + exposed) if hidden + exposed > 0 else 0.0


def write_chrome_trace(preds: list[Prediction], path: str | Path, *, detail_microbatches: int | None = None,
                       microbatches: Sequence[int] | None = None) -> None:
    """Write the traces of ``preds`` (one process group per prediction) to ``path`` as JSON."""
    events: list[dict[str, Any]] = []
    for i, pred in enumerate(preds):
        window = check_window(pred, microbatches) if microbatches is not None else None
        events += chrome_trace_events(pred, detail_microbatches=detail_microbatches, microbatches=window,
                                      pid_base=100 * i)
    write_atomic(path, json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, allow_nan=False))
