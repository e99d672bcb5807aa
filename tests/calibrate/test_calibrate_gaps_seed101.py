"""Gaps the seed-101 mutation sample of calibrate/ found (docs/mutation.md): one test per surviving mutant
that a real input can observe, each checking the behaviour from its meaning, not the implementation's
formula. Small synthetic inputs throughout; the reference-layer runner is tested with its torch subprocess
replaced."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sim.catalog import load_gpu
from tests.job_trace import DEEPEP_DISPATCH, job_events

_ROOT = Path(__file__).resolve().parents[2]


def _our_event(name: str, dur_us: float, **args: Any) -> dict[str, Any]:
    """A complete event of our own trace format (shared op name, work in args)."""
    return {"ph": "X", "name": name, "cat": "kernel", "pid": 0, "tid": 1, "ts": 0.0, "dur": dur_us,
            "args": {"kind": "gemm", "dtype": "bf16", "size": 1e10, "work": 1e10, **args}}


def _job_events(*kernels: tuple[str, float, float, Any]) -> list[dict[str, Any]]:
    """A job trace of DeepEP dispatch kernels (phase annotation, start us, duration us, grid)."""
    return job_events(*((phase, DEEPEP_DISPATCH, ts, dur, grid) for phase, ts, dur, grid in kernels))


def test_simulated_trace_process_is_named_simulated_by_default(tmp_path: Path) -> None:
    """(calibrate.compare write_simulated_trace) The simulated trace's process is called "simulated" unless
    the caller names it (``moesim calibrate compare`` names it after the replay mode)."""
    from calibrate.compare import Comparison, write_simulated_trace

    recs = [("a", "compute", "fwd", 0.0, 0.001, {"op": "attn.core"})]

    def process_name(path: Path) -> str:
        events = json.loads(path.read_text())["traceEvents"]
        (name,) = [e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"]
        return name

    write_simulated_trace(Comparison([], 1.0, 1.0, recs), tmp_path / "a.json")
    assert process_name(tmp_path / "a.json") == "simulated"
    write_simulated_trace(Comparison([], 1.0, 1.0, recs), tmp_path / "b.json", name="moesim simulated (replay)")
    assert process_name(tmp_path / "b.json") == "moesim simulated (replay)"


def test_synthetic_dispatch_overlaps_nothing_and_holds_no_sms() -> None:
    """(calibrate.synthetic synthetic_trace) Only compute events overlap communication: the one dispatch per
    layer is the communication, not a kernel slowed by it, so it has overlap 0 and holds no SMs; half the
    compute events overlap (and those carry the held SMs)."""
    from calibrate.synthetic import synthetic_trace

    events = synthetic_trace(seed=0, noise=0.0, repeats=4, held_sms=20)
    comm = [e for e in events if e["args"]["kind"] == "comm"]
    assert len(comm) == 4
    assert all(e["args"]["overlap"] == 0.0 and e["args"]["held_sms"] == 0 for e in comm), comm
    dense = [e for e in events if e["args"]["kind"] == "gemm"]
    overlapped = [e for e in dense if e["args"]["overlap"]]
    assert 2 * len(overlapped) == len(dense) and all(e["args"]["held_sms"] == 20 for e in overlapped)


def test_fitted_document_is_dated_in_utc_iso_format(tmp_path: Path) -> None:
    """(calibrate.document fit_document) The provenance records when the fit ran as an ISO-8601 UTC
    timestamp (``YYYY-MM-DDTHH:MM:SSZ``), between the moments before and after the fit."""
    from calibrate.document import fit_document
    from calibrate.synthetic import synthetic_trace

    path = tmp_path / "syn.json"
    path.write_text(json.dumps({"traceEvents": synthetic_trace(seed=1, noise=0.0, repeats=2)}), encoding="utf-8")
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    doc = fit_document([path], gpu="h800", name="t")
    after = datetime.datetime.now(datetime.UTC)
    date = datetime.datetime.strptime(doc["provenance"]["date"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    assert before <= date <= after


def test_op_seconds_residuals_leave_out_zero_duration_instances() -> None:
    """(calibrate.fit fit_tables) A memory-bound op with a zero-duration instance (a kernel too short for
    the profiler's clock) still fits: its time is the median of all instances, and its residuals are over
    the instances with a duration (a relative error against zero is undefined)."""
    from calibrate.fit import Sample, fit_tables

    secs = [0.0, 2e-5, 2e-5, 4e-5]
    samples = [Sample("attn.norm", "fwd", "mem", "-", 1.0, 1.0, x, label="norm@fwd", layer=i) for i, x in enumerate(secs)]
    tables = fit_tables(samples, load_gpu("h800"))
    assert tables["op_seconds"]["norm@fwd"] == pytest.approx(2e-5, rel=1e-9)
    res = tables["residuals"]["op_seconds.norm@fwd"]
    assert res["n"] == 3.0
    assert res["p10_rel"] == pytest.approx(-0.4, rel=1e-6) and res["p90_rel"] == pytest.approx(0.0, abs=1e-12)


def test_our_event_without_held_sms_holds_no_sms() -> None:
    """(calibrate.fit samples_from_ours) ``held_sms`` is optional: an event that does not give it held no
    SMs, so even fully overlapped its clean time is its measured time (no engine slowdown to remove)."""
    from calibrate.fit import clean_seconds, samples_from_ours

    (s,) = samples_from_ours([_our_event("attn.o_proj", 100.0, overlap=1.0)])
    assert s.held_sms == 0
    assert clean_seconds(s, 132) == pytest.approx(100e-6, rel=1e-12)


def test_our_events_keep_their_phase() -> None:
    """(calibrate.fit samples_from_ours) An event's ``phase`` arg is its sample's phase (backward GEMMs fit
    the dgrad / wgrad stack efficiencies, not the forward curve); without one the phase is ``fwd``."""
    from calibrate.fit import samples_from_ours

    got = samples_from_ours([_our_event("attn.o_proj", 100.0, phase="dgrad"),
                             _our_event("attn.o_proj", 100.0, phase="wgrad"),
                             _our_event("attn.o_proj", 100.0)])
    assert [s.phase for s in got] == ["dgrad", "wgrad", "fwd"]


def test_job_trace_grid_that_is_empty_or_out_of_range_reads_as_unknown() -> None:
    """(calibrate.rules read_job_trace) A kernel's first grid dimension is its SM count when it is a
    plausible number; an empty grid, a non-number or one beyond 2**31 reads as unknown (0), not an error
    nor a huge count."""
    from calibrate.rules import read_job_trace

    reading = read_job_trace(_job_events(("dispatch(F)", 100.0, 30.0, [24, 1, 1]),
                                         ("dispatch(F)", 200.0, 30.0, []),
                                         ("dispatch(F)", 300.0, 30.0, ["24"]),
                                         ("dispatch(F)", 400.0, 30.0, [2 ** 40, 1, 1])))
    assert [k.grid0 for k in sorted(reading.kernels, key=lambda k: k.start_s)] == [24, 0, 0, 0]


def test_job_trace_forward_dispatch_is_a_forward_sample() -> None:
    """(calibrate.rules read_job_trace) A DeepEP kernel under a forward annotation (``dispatch(F)``) is a
    forward communication sample, one under a backward annotation (``dispatch(B)``) a backward one."""
    from calibrate.rules import read_job_trace

    reading = read_job_trace(_job_events(("dispatch(F)", 100.0, 30.0, [24, 1, 1]),
                                         ("dispatch(B)", 300.0, 30.0, [24, 1, 1])))
    comm = sorted((s for s in reading.samples if s.kind == "comm"), key=lambda s: s.start_s)
    assert [(s.phase, s.label) for s in comm] == [("fwd", "deepep.dispatch.fwd"), ("bwd", "deepep.dispatch.bwd")]


def test_quantize_rate_is_fitted_from_the_cast_kernels_of_each_layer() -> None:
    """(calibrate.memory_fit fit_memory_rates) A trace whose layers run cast/quantize kernels gets a
    ``quantize_bw_eff``: a fraction of HBM bandwidth in (0, 1], and a trace whose layers take twice as long
    on them gets half the rate."""
    from calibrate.memory_fit import fit_memory_rates
    from calibrate.rules import Kernel, TraceReading

    def reading(seconds: float) -> TraceReading:
        kernels = [Kernel("cast_kernel", "mem.quant", "7", layer * 1.0 + i * 0.1, seconds / 2, "mlp(F)", layer)
                   for layer in range(3) for i in range(2)]
        return TraceReading(kernels, [], "h800", 132, 3.0)

    gpu = load_gpu("h800")
    fast, _ = fit_memory_rates(reading(0.02), gpu)
    slow, residuals = fit_memory_rates(reading(0.04), gpu)
    assert 0.0 < fast["quantize_bw_eff"] <= 1.0
    assert fast["quantize_bw_eff"] == pytest.approx(2 * slow["quantize_bw_eff"], rel=1e-4)
    assert residuals["quantize_bw_eff"]["n"] == 3.0


def test_reference_subprocess_imports_this_checkout_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """(calibrate.microbench subprocess_env) The reference runs import this checkout: its root leads the
    child's ``PYTHONPATH``, ahead of any path the caller had there, which is kept."""
    from calibrate.microbench import subprocess_env

    root = str(Path(sys.modules["calibrate"].__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert subprocess_env()["PYTHONPATH"] == root + os.pathsep + "/elsewhere"
    monkeypatch.delenv("PYTHONPATH")
    assert subprocess_env()["PYTHONPATH"] == root


def test_reference_run_record_names_its_model_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(calibrate.microbench run_reference_case) A reference run's record carries the case's model size
    under ``dim`` and ``experts`` (as ``validate-reference`` records do), beside the full model fields. The
    reference run is replaced by one that writes a meta.json."""
    from calibrate import microbench

    def fake_run(cmd, **kw):  # type: ignore[no-untyped-def]
        prof = Path(cmd[cmd.index("--profile") + 1])
        prof.mkdir(parents=True)
        meta = {"timing": {"step_s_per_rank": [[0.2, 0.1]], "cpu_step_s_per_rank": [[0.3, 0.2]]}}
        (prof / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(microbench.subprocess, "run", fake_run)
    out = microbench.run_reference_case(microbench.RefCase("t", 64, dim=512, experts=4), tmp_path)
    assert out["ok"] and out["dim"] == 512 and out["experts"] == 4
    assert out["model"]["dim"] == 512 and out["model"]["n_routed_experts"] == 4
