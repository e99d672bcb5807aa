"""Gaps the seed-23 mutation sample of calibrate/ found (docs/mutation.md, issue 16): one test per surviving
mutant that a real input can observe, each checking the behaviour from its meaning, not the implementation's formula."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sim import ops
from sim.catalog import load_gpu
from tests.shared_trace import TRACE, needs_trace


@pytest.fixture(scope="module")
def trace_events():  # type: ignore[no-untyped-def]
    from calibrate.traces import load_document

    events, _ = load_document(TRACE)
    return events


@pytest.fixture(scope="module")
def reading(trace_events):  # type: ignore[no-untyped-def]
    from calibrate.rules import read_job_trace

    return read_job_trace(trace_events)


def test_simulated_trace_is_a_valid_chrome_trace(tmp_path: Path) -> None:
    """(calibrate.compare write_simulated_trace) Chrome trace format: thread_name metadata events carry the
    name in args.name; complete events give ts and dur in microseconds."""
    from calibrate.compare import Comparison, write_simulated_trace

    recs = [("a", "compute", "fwd", 0.001, 0.0035, {"op": "attn.core"}),
            ("b", "comm", "fwd", 0.002, 0.0071, {"op": "moe.dispatch"})]
    path = tmp_path / "sim.json"
    write_simulated_trace(Comparison([], 1.0, 1.0, recs), path)
    events = json.loads(path.read_text())["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(threads.values()) == ["comm", "compute"]
    spans = {e["name"]: (e["ts"], e["dur"], threads[e["tid"]]) for e in events if e["ph"] == "X"}
    assert spans["attn.core"] == (pytest.approx(1000.0, rel=1e-12), pytest.approx(2500.0, rel=1e-12), "compute")
    assert spans["moe.dispatch"] == (pytest.approx(2000.0, rel=1e-12), pytest.approx(5100.0, rel=1e-12), "comm")


def test_compute_stream_is_the_busiest_without_deepep_kernels() -> None:
    """(calibrate.document _compute_stream) DeepEP kernels run on their own stream; a window with more DeepEP
    launches than GEMMs still has the GEMMs' stream as its compute stream."""
    from calibrate.document import _compute_stream
    from calibrate.rules import Kernel, TraceReading

    kernels = [Kernel("gemm", "gemm.fp8", "7", i * 1e-3, 1e-4, "fwd", 0) for i in range(2)]
    kernels += [Kernel(f"deepep {f}", f, "20", i * 1e-3, 1e-4, "fwd", 0)
                for i, f in enumerate(["deepep.dispatch", "deepep.combine", "deepep.notify"])]
    assert _compute_stream(TraceReading(kernels, [], "h800", 132, 1.0)) == "7"


def test_sm_sharing_fit_ignores_kernels_with_no_duration() -> None:
    """(calibrate.fit fit_sm_sharing) A zero-length kernel is no measurement of a slowdown."""
    from calibrate.fit import Sample, fit_sm_sharing

    def s(overlap: float, seconds: float) -> Sample:
        return Sample("attn.q_proj", "fwd", "gemm", "fp8", 1e12, 1e12, seconds, overlap=overlap, held_sms=20)

    measured = [s(f, 1e-3 * (1 + 0.5 * f)) for f in (0.0, 0.5, 1.0)]
    clean = fit_sm_sharing(measured)
    assert clean["samples"] == 3 and clean["fitted_slowdown"] == pytest.approx(0.5, rel=1e-3)
    assert fit_sm_sharing([*measured, s(0.25, 0.0)]) == clean


def test_dsv3_query_up_projection_has_every_heads_query_dims() -> None:
    """(calibrate.rules dsv3_slots) DeepSeek-V3's q_b_proj maps q_lora_rank 1536 to n_heads 128 x
    (qk_nope 128 + qk_rope 64) = 24576 outputs (its config.json): 2 * T * 1536 * 24576 FLOPs a call."""
    from calibrate.rules import RunShapes, dsv3_slots

    sh = RunShapes()
    assert (sh.q_lora, sh.H, sh.qk_nope, sh.qk_rope) == (1536, 128, 128, 64)
    fwd = dsv3_slots(sh)[("attn(F)", "gemm.fp8")]
    q_proj = sorted(flops for op, gpass, flops, _ in fwd if op == ops.ATTN_Q_PROJ and gpass == "fwd")
    assert 2.0 * sh.T * 1536 * 24576 in q_proj


def test_an_empty_trace_reads_with_its_notes() -> None:
    """(calibrate.rules read_job_trace) The reading says where GEMM shapes come from and that there are no kernels."""
    from calibrate.rules import read_job_trace

    r = read_job_trace([])
    assert r.kernels == [] and r.samples == []
    assert any(n.startswith("shapes: the trace has no recorded input shapes; GEMM sizes from the run's known config")
               for n in r.notes)
    assert "no GPU kernels in the trace" in r.notes


@needs_trace
def test_job_trace_kernels_keep_their_names_and_samples_their_kinds(trace_events, reading) -> None:  # type: ignore[no-untyped-def]
    """(calibrate.rules read_job_trace) Each attributed kernel keeps the trace's kernel name; attention kernels
    give samples of kind attn (Sample: gemm, grouped_gemm, attn, mem, comm, notify); every sample has a
    positive finite size and work, as samples read from our own traces must."""
    names = {str(e.get("name")) for e in trace_events if e.get("ph") == "X"}
    assert reading.kernels and all(k.name in names for k in reading.kernels)
    attn_kernels = [k for k in reading.kernels if k.family in ("attn.fwd", "attn.bwd")]
    attn = [s for s in reading.samples if s.label.startswith("attn.core.")]
    assert attn_kernels and len(attn) == len(attn_kernels) and {s.kind for s in attn} == {"attn"}
    assert {"gemm", "grouped_gemm", "attn", "mem", "comm", "notify"} >= {s.kind for s in reading.samples}
    for s in reading.samples:
        assert isinstance(s.size, int | float) and math.isfinite(s.size) and s.size > 0, s
        assert math.isfinite(s.work) and s.work > 0, s


@needs_trace
def test_fitted_document_says_bf16_kernels_ran_for_real() -> None:
    """(calibrate.document fit_document) The trace's router GEMMs ran in BF16: the kernels table, keyed by the
    cost model's dtype names, marks bf16 (and fp8) real and mxfp8 absent (Hopper has none)."""
    from calibrate.document import fit_document
    from sim.costs import default_costs

    doc = fit_document([TRACE], name="t")
    assert doc["kernels"] == {"fp8": "real", "bf16": "real", "mxfp8": "absent"}
    assert set(doc["kernels"]) <= set(default_costs(load_gpu("h800")).gemm_eff)


def test_a_gpu_reference_run_is_timed_by_its_step_times(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(calibrate.microbench run_reference_case) On a GPU the reference's step times (CUDA events,
    ``timing.step_s_per_rank`` of its meta.json) time the case, the slowest rank of each step; the CPU-time
    list is for CPU runs only. The reference run is replaced by one that writes such a meta.json."""
    import subprocess

    from calibrate import microbench

    per_rank = [[0.30, 0.20, 0.25], [0.28, 0.22, 0.21]]

    def fake_run(cmd, **kw):  # type: ignore[no-untyped-def]
        prof = Path(cmd[cmd.index("--profile") + 1])
        prof.mkdir(parents=True)
        meta = {"timing": {"clock": "cuda_events", "step_s_per_rank": per_rank,
                           "cpu_step_s_per_rank": [[9.0, 9.0, 9.0], [9.0, 9.0, 9.0]]}, "device": "fake gpu"}
        (prof / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(microbench.subprocess, "run", fake_run)
    out = microbench.run_reference_case(microbench.RefCase("t", 64, ep=2), tmp_path, device="cuda")
    assert out["ok"] and out["step_s"] == [0.30, 0.22, 0.25] and out["measured_s"] == 0.22
    assert out["clock"] == "cuda_events" and out["wall_step_s"] == [0.30, 0.22, 0.25]
