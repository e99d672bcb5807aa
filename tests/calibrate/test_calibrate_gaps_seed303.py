"""Gaps the seed-303 mutation sample of calibrate/ found (docs/mutation.md): one test per surviving mutant
that a real input can observe, each checking the behaviour from its meaning, not the implementation's
formula. Small synthetic inputs throughout (the real trace's tests skip where ``../shared`` is absent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim.catalog import load_gpu
from tests.job_trace import job_events


def test_fp32_gemms_are_measured_against_the_bf16_peak() -> None:
    """(calibrate.fit _peak) FP32 (TF32) GEMMs run on the 16-bit tensor-core rate, not the FP8 one."""
    from calibrate.fit import _peak

    gpu = load_gpu("h100")
    assert _peak(gpu, "fp32") == _peak(gpu, "bf16") == gpu.bf16_flops
    assert _peak(gpu, "fp8") == gpu.fp8_flops


def test_a_written_profile_is_recognised_as_one(tmp_path: Path) -> None:
    """(calibrate.microbench is_profile) A JSON file with the profile schema is a profile; another JSON
    document or a non-JSON file is not."""
    from calibrate.microbench import PROFILE_SCHEMA, is_profile

    good, other, text = tmp_path / "profile.json", tmp_path / "trace.json", tmp_path / "notes.json"
    good.write_text(json.dumps({"schema": PROFILE_SCHEMA, "groups": {}}), encoding="utf-8")
    other.write_text(json.dumps({"traceEvents": []}), encoding="utf-8")
    text.write_text("not json", encoding="utf-8")
    assert is_profile(good)
    assert not is_profile(other) and not is_profile(text)


def test_backward_gemm_residuals_are_relative_to_the_fitted_ratio() -> None:
    """(calibrate.fit fit_tables) When every backward GEMM runs at exactly half the forward curve, the fitted
    ``gemm.dgrad`` efficiency is 0.5 and its residuals are zero: they measure scatter around the fit."""
    from calibrate.fit import Sample, fit_tables

    gpu = load_gpu("h800")
    sizes = [1e10, 1e11, 1e12]
    fwd = [Sample("attn.o_proj", "fwd", "gemm", "bf16", s, s, s / (gpu.bf16_flops * 0.6), layer=i)
           for i in range(3) for s in sizes]
    dgrad = [Sample("attn.o_proj", "dgrad", "gemm", "bf16", s, s, s / (gpu.bf16_flops * 0.6 * 0.5), layer=i)
             for i in range(3) for s in sizes]
    tables = fit_tables(fwd + dgrad, gpu)
    assert tables["stack_efficiency"][gpu.arch]["gemm.dgrad"] == pytest.approx(0.5, rel=1e-3)
    stats = tables["residuals"][f"stack_efficiency.{gpu.arch}.gemm.dgrad.bf16"]
    assert abs(stats["p10_rel"]) < 1e-3 and abs(stats["p90_rel"]) < 1e-3


def test_a_fitted_calibration_says_where_each_table_came_from(tmp_path: Path) -> None:
    """(calibrate.document fit_document) The fitted document carries its per-table sources."""
    from calibrate.document import fit_document
    from calibrate.synthetic import synthetic_trace

    path = tmp_path / "syn.json"
    path.write_text(json.dumps({"traceEvents": synthetic_trace(seed=1, noise=0.0, repeats=2)}), encoding="utf-8")
    doc = fit_document([path], gpu="h800", name="t")
    assert doc["sources"]["gemm_eff"].startswith("fitted")
    assert "launch_overhead_s" in doc["sources"]


def test_job_trace_attention_backward_is_labelled_backward() -> None:
    """(calibrate.rules read_job_trace) A FlashAttention backward kernel is a backward attention sample,
    labelled ``attn.core.bwd``, with 2.5x the forward's FLOPs."""
    from calibrate.rules import read_job_trace

    reading = read_job_trace(job_events(("attn(F)", "flash_fwd_kernel", 100.0, 40.0, None),
                                        ("attn(B)", "flash_bwd_kernel", 300.0, 90.0, None)))
    attn = sorted((s for s in reading.samples if s.kind == "attn"), key=lambda s: s.start_s)
    assert [(s.phase, s.label) for s in attn] == [("fwd", "attn.core.fwd"), ("bwd", "attn.core.bwd")]
    assert attn[1].work == pytest.approx(2.5 * attn[0].work)


def _reading_and_calibration(launch_overhead_s: float) -> tuple[Any, Any]:
    from calibrate.fit import Sample
    from calibrate.rules import TraceReading
    from sim.calibration import parse_calibration

    samples = [Sample("attn.o_proj", "attn(F)", "gemm", "bf16", 1e11, 1e11, 2e-4, start_s=0.0, label="o_proj"),
               Sample("moe.dispatch", "dispatch(F)", "comm", "fp8", 1e8, 1e8, 3e-4, start_s=2e-4,
                      label="deepep.dispatch.fp8", stream="comm")]
    reading = TraceReading(kernels=[], samples=samples, device="NVIDIA H800", num_sms=132, window_s=5e-4)
    doc = {"schema": "moesim.calibration", "version": 2, "name": "t", "gpu": "h800",
           "provenance": {"method": "test", "sources": ["x"]}, "launch_overhead_s": launch_overhead_s,
           "comm_rates": {"deepep.dispatch.fp8": {"overhead_s": 0.0, "bytes_per_s": 1e8 / 3e-4}}}
    return reading, parse_calibration(json.dumps(doc), "cal.json")


def test_compare_reports_a_gemms_kernel_time_without_the_launch_gap() -> None:
    """(calibrate.compare compare_reading) A GEMM's simulated row is its kernel's replayed time, whatever the
    calibration's launch gap: the replay adds no gap to a kernel, so none is taken off (before this test the
    rows of GEMMs and attention were short by the gap, floored at zero)."""
    from calibrate.compare import compare_reading

    rows = {}
    for gap in (0.0, 1e-3):
        reading, cal = _reading_and_calibration(gap)
        (row,) = [r for r in compare_reading(reading, cal).rows if r.kind == "gemm"]
        rows[gap] = row.simulated_s
    assert rows[1e-3] == pytest.approx(rows[0.0], rel=1e-9)


def test_compare_keeps_the_phase_order_across_streams() -> None:
    """(calibrate.compare compare_reading) The dispatch that follows attention in the forward waits for it,
    though it runs on the communication stream: the replayed span is attention plus dispatch."""
    from calibrate.compare import compare_reading

    reading, cal = _reading_and_calibration(0.0)
    result = compare_reading(reading, cal)
    by_name = {name: (a, b) for name, _st, _ph, a, b, _x in result.records}
    assert by_name["deepep.dispatch.fp8"][0] >= by_name["o_proj"][1] - 1e-12
    assert result.simulated_window_s == pytest.approx(by_name["o_proj"][1] - by_name["o_proj"][0]
                                          + by_name["deepep.dispatch.fp8"][1] - by_name["deepep.dispatch.fp8"][0], rel=1e-9)
