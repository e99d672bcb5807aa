"""Step-time breakdown: seconds per category on the busiest pipeline rank, summing exactly to the step,
and the communication hidden under compute, by kind.

Categories: ``compute.<op class>``, exposed communication (``comm.a2a``: exposed all-to-all seconds,
``comm.a2a_count_exchange``, ``comm.tp``, ``comm.fsdp``, ``comm.dp``, ``comm.wait``: a stream waiting for
a peer or another stream with nothing running), ``host_sync`` (GPU idle behind a blocking host copy),
``pipeline_bubble`` and ``optimizer``. Hidden communication (run under compute, so not on the step's
path) is reported apart, in :attr:`sim.predict.Prediction.hidden_comm`.
"""

from __future__ import annotations

from collections import defaultdict

from sim.predict.pipeline import Step

__all__ = ["breakdown"]


def breakdown(step: Step) -> tuple[dict[str, float], dict[str, float]]:
    """(exposed breakdown summing to ``step.step_s``, hidden communication by kind) of the busiest rank."""
    pipe, chunks = step.pipe, step.chunks
    rank = max(range(len(pipe.actions)), key=pipe.busy)
    out: dict[str, float] = defaultdict(float)
    hidden: dict[str, float] = defaultdict(float)

    def add(parts: dict[str, float], hid: dict[str, float], total: float, dur: float) -> None:
        scale = dur / total if total > 0 else 0.0
        for k, v in parts.items():
            out[k] += v * scale
        for k, v in hid.items():
            hidden[k] += v * scale
        if total <= 0 and dur > 0:
            out["comm.wait"] += dur

    for idx, (phase, stage, _mb, s, e) in enumerate(pipe.actions[rank]):
        dur = e - s
        if phase == "FB":
            fs, bs = pipe.pair_stages[(rank, idx)]
            res = step.pairs[(fs, bs)]
            add(res.parts, res.hidden_s, res.time_s, dur)
        elif phase == "F":
            ch = chunks[stage]
            add(ch.f_parts, ch.f_hidden, ch.f_s, dur)
        elif phase == "W":
            out["compute.wgrad"] += dur
        else:  # B, or a zero-bubble input-gradient B without its W
            ch = chunks[stage]
            add(ch.b_parts, ch.b_hidden, ch.b_s, dur)
    fsdp_ag = sum(step.first_ag[s] for s in {a[1] for a in pipe.actions[rank]})
    out["comm.fsdp"] += fsdp_ag + step.rs_tail
    if step.dp_ar:
        out["comm.dp"] += step.dp_ar
    out["optimizer"] += step.opt
    out["pipeline_bubble"] = max(0.0, pipe.makespan - pipe.busy(rank) - fsdp_ag)
    total = sum(out.values())
    if abs(total - step.step_s) > 1e-9 * max(1.0, step.step_s):
        out["pipeline_bubble"] += step.step_s - total  # FSDP gathers of stages first reached inside a pair
    return {k: float(v) for k, v in sorted(out.items()) if v or k == "pipeline_bubble"}, \
        {k: float(v) for k, v in sorted(hidden.items())}
