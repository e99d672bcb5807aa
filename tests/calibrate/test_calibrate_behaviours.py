"""Behaviours of calibrate/ that a mutation sample found unchecked, and their neighbours: what each function
promises its callers, checked on small synthetic inputs with values worked out by hand (fit tables, the
measured-vs-simulated comparison and its summary, job-trace samples, multi-step traces, the notify-barrier
fit, the traced plan's prediction, the reference-run record, the fitted document's sources)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from sim import ops
from sim.errors import ConfigError
from sim.specs import GPUSpec
from tests.job_trace import job_events

DISPATCH = "void dpsk::ep::internode::dispatch<false, 8, false, 8>(int4*)"
COMBINE = "void dpsk::ep::internode::combine<false, 8>(int4*)"
NOTIFY = "void dpsk::ep::internode::notify_dispatch<8>(int*)"
FP8_GEMM = "void cutlass::device_kernel<dpsk::fp8_ptp128c::GemmKernel>"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4>"

#: A GPU with round numbers: 1e15 BF16 FLOP/s, 2e15 FP8, 132 SMs.
GPU = GPUSpec("synthetic", bf16_flops=1e15, fp8_flops=2e15, hbm_bytes=80e9, hbm_bw_bytes_per_s=3e12, num_sms=132,
              nvlink_bw_bytes_per_s=450e9, arch="sm90")


def _job(*kernels: tuple[str, str, float, float, Any, int]) -> list[dict[str, Any]]:
    """Profiler events of ``kernels`` (phase annotation, kernel name, start us, duration us, grid or None,
    stream): tests/job_trace.py's events with each kernel on its own stream."""
    return job_events(*kernels)


def _calibration(**tables: Any) -> Any:
    from sim.calibration import parse_calibration

    doc = {"schema": "moesim.calibration", "version": 2, "name": "t", "gpu": "h800",
           "provenance": {"method": "test", "sources": ["x"]}, **tables}
    return parse_calibration(json.dumps(doc), "cal.json")


# ---------------------------------------------------------------- calibrate.fit


def test_sm_sharing_table_holds_the_comm_kernels_sms_and_the_engine_model_slowdown() -> None:
    """(fit_tables) sm_sharing.comm_sms is the median SMs held by comm kernels that hold any (0 does not
    count), and model_slowdown is h / (N - h) for the GPU's N SMs."""
    from calibrate.fit import Sample, fit_tables

    comm = [Sample("moe.dispatch", "fwd", "comm", "fp8", 1e6, 1e6, 1e-4, held_sms=h, label="a2a", layer=i)
            for i, h in enumerate((0, 0, 0, 20, 30))]
    tables = fit_tables(comm, GPU)
    assert tables["sm_sharing"]["comm_sms"] == 25.0
    assert tables["sm_sharing"]["model_slowdown"] == round(25 / 107, 4) == 0.2336


def test_no_sm_sharing_table_when_no_comm_kernel_holds_sms() -> None:
    """(fit_tables) Communication kernels that hold no SMs give no SM-sharing table (no slowdown to model)."""
    from calibrate.fit import Sample, fit_tables

    comm = [Sample("moe.dispatch", "fwd", "comm", "fp8", 1e6, 1e6, 1e-4, held_sms=0, label="a2a") for _ in range(3)]
    tables = fit_tables(comm, GPU)
    assert "sm_sharing" not in tables and tables["comm_rates"]["a2a"]["bytes_per_s"] == pytest.approx(1e10)


def test_comm_rate_row_is_the_median_bytes_seconds_and_rate() -> None:
    """(fit_tables) A comm kind's row: median bytes, median seconds and median bytes/s of its kernels, with a
    residual per kernel relative to the median rate."""
    from calibrate.fit import Sample, fit_tables

    comm = [Sample("moe.combine", "bwd", "comm", "bf16", b, b, s, label="deepep.combine.bwd")
            for b, s in ((1e6, 1e-4), (2e6, 1e-4), (4e6, 1e-4))]
    tables = fit_tables(comm, GPU)
    assert tables["comm_rates"]["deepep.combine.bwd"] == {"bytes": 2e6, "seconds": 1e-4, "bytes_per_s": 2e10}
    res = tables["residuals"]["comm_rates.deepep.combine.bwd"]
    assert res["n"] == 3.0 and res["median_abs_rel"] == 0.5


def test_attention_efficiencies_are_split_by_pass() -> None:
    """(fit_tables) attn_fwd_eff is the median efficiency of forward attention kernels at the BF16 peak,
    attn_bwd_eff that of every other pass."""
    from calibrate.fit import Sample, fit_tables

    fwd = [Sample("attn.core", "fwd", "attn", "bf16", 1e12, 1e12, 1e12 / (1e15 * e)) for e in (0.4, 0.5, 0.6)]
    bwd = [Sample("attn.core", "bwd", "attn", "bf16", 1e12, 1e12, 1e12 / (1e15 * 0.25))]
    tables = fit_tables(fwd + bwd, GPU)
    assert tables["attn_fwd_eff"] == pytest.approx(0.5, abs=1e-6)
    assert tables["attn_bwd_eff"] == pytest.approx(0.25, abs=1e-6)
    assert tables["residuals"]["attn_fwd_eff"]["n"] == 3.0


def test_grouped_gemm_wgrad_has_its_own_curve_and_fp8_uses_the_fp8_peak() -> None:
    """(fit_tables) Grouped GEMM wgrad samples fit ``<dtype>_wgrad``; fwd and dgrad fit ``<dtype>``; FP8
    efficiency is against the FP8 peak."""
    from calibrate.fit import Sample, fit_tables

    def g(phase: str, eff: float) -> Sample:
        return Sample("moe.expert_gemm", phase, "grouped_gemm", "fp8", 4096.0, 1e12, 1e12 / (2e15 * eff))

    tables = fit_tables([g("fwd", 0.5), g("dgrad", 0.5), g("wgrad", 0.3)], GPU)
    assert tables["grouped_gemm_eff"] == {"fp8": {"sizes": [4096.0], "values": [0.5]},
                                          "fp8_wgrad": {"sizes": [4096.0], "values": [0.3]}}
    assert set(tables["residuals"]) >= {"grouped_gemm_eff.fp8", "grouped_gemm_eff.fp8_wgrad"}


def test_memory_op_seconds_are_clean_and_keyed_by_label_or_op_at_phase() -> None:
    """(fit_tables) A memory-bound op's op_seconds entry is its median clean time (the SM-sharing slowdown
    removed), keyed by its label, or ``op@phase`` when it has none."""
    from calibrate.fit import Sample, fit_tables

    samples = [Sample("attn.norm", "fwd", "mem", "-", 1.0, 1.0, 1e-3, overlap=0.5, held_sms=33),
               Sample("moe.permute", "bwd", "mem", "-", 1.0, 1.0, 2e-4, label="perm#0")]
    tables = fit_tables(samples, GPU)
    assert tables["op_seconds"] == {"attn.norm@fwd": pytest.approx(0.875e-3, rel=1e-9), "perm#0": 2e-4}


def test_clean_seconds_removes_the_engine_slowdown_only_when_sms_are_held_and_overlapped() -> None:
    """(clean_seconds) seconds x (1 - overlap x held / N); unchanged without held SMs or without overlap."""
    from calibrate.fit import Sample, clean_seconds

    s = Sample("attn.q_proj", "fwd", "gemm", "fp8", 1.0, 1.0, 1e-3, overlap=0.5, held_sms=33)
    assert clean_seconds(s, 132) == pytest.approx(0.875e-3, rel=1e-12)
    assert clean_seconds(Sample("a", "fwd", "gemm", "fp8", 1.0, 1.0, 1e-3, overlap=0.5), 132) == 1e-3
    assert clean_seconds(Sample("a", "fwd", "gemm", "fp8", 1.0, 1.0, 1e-3, held_sms=33), 132) == 1e-3


def test_fit_curve_merges_sizes_within_12_percent_and_clamps_efficiency() -> None:
    """(fit_curve) Sizes within 10^0.05 of a cluster's first share one knot at their geometric mean; 20%
    apart they are two knots; an efficiency above 1.5 is stored as 1.5."""
    from calibrate.fit import Sample, fit_curve

    def s(size: float, eff: float) -> Sample:
        return Sample("attn.o_proj", "fwd", "gemm", "bf16", size, size, size / (1e15 * eff))

    curve, stats = fit_curve([s(1e10, 0.4), s(1.1e10, 0.4)], peak=1e15)
    assert curve["sizes"] == [pytest.approx(math.sqrt(1.1) * 1e10, rel=1e-5)] and curve["values"] == [0.4]
    assert stats["n"] == 2.0
    two, _ = fit_curve([s(1e10, 0.4), s(1.2e10, 0.6)], peak=1e15)
    assert two == {"sizes": [1e10, 1.2e10], "values": [0.4, 0.6]}
    high, _ = fit_curve([s(1e10, 3.0)], peak=1e15)
    assert high["values"] == [1.5]


@pytest.mark.parametrize("samples, peak, message", [
    ([], 1e15, "fit: no samples to fit a curve to"),
    (None, 0.0, "fit: peak rate must be positive, got 0.0"),
    (None, -1.0, "fit: peak rate must be positive, got -1.0"),
])
def test_fit_curve_rejects_no_samples_and_a_non_positive_peak(samples: Any, peak: float, message: str) -> None:
    """(fit_curve) No samples, or a peak rate that is not positive, is a ConfigError saying so."""
    from calibrate.fit import Sample, fit_curve

    given = samples if samples is not None else [Sample("a", "fwd", "gemm", "bf16", 1e9, 1e9, 1e-3)]
    with pytest.raises(ConfigError) as err:
        fit_curve(given, peak)
    assert str(err.value) == message


def test_fit_curve_rejects_samples_that_all_have_zero_duration() -> None:
    """(fit_curve) Zero-duration samples carry no rate: when all are zero-duration the fit says so."""
    from calibrate.fit import Sample, fit_curve

    with pytest.raises(ConfigError, match="^fit: every sample has zero duration$"):
        fit_curve([Sample("a", "fwd", "gemm", "bf16", 1e9, 1e9, 0.0)], 1e15)


def test_residual_stats_of_nothing_one_and_several_errors() -> None:
    """(residual_stats) Empty: all zero; one error: it is both quantiles; several: linear-interpolated p10/p90."""
    from calibrate.fit import residual_stats

    assert residual_stats([]) == {"n": 0.0, "median_abs_rel": 0.0, "p10_rel": 0.0, "p90_rel": 0.0}
    assert residual_stats([-0.2]) == {"n": 1.0, "median_abs_rel": 0.2, "p10_rel": -0.2, "p90_rel": -0.2}
    got = residual_stats([0.3, -0.5, 0.0, 0.1, -0.1, 0.2])
    assert got == {"n": 6.0, "median_abs_rel": 0.15, "p10_rel": -0.3, "p90_rel": 0.25}


def test_our_events_become_samples_in_seconds_and_other_events_are_skipped() -> None:
    """(samples_from_ours) A complete event with a shared op name and kind/dtype/size/work args is a sample
    (microseconds to seconds); other phases, unknown names and events without those args are skipped."""
    from calibrate.fit import samples_from_ours

    args = {"kind": "comm", "dtype": "fp8", "size": 1e6, "work": 2e6, "overlap": 0.25, "held_sms": 20,
            "layer": 3, "label": "x", "phase": "bwd"}
    events = [{"ph": "X", "name": "moe.dispatch", "ts": 1500.0, "dur": 250.0, "args": args},
              {"ph": "B", "name": "moe.dispatch", "ts": 0.0, "dur": 1.0, "args": args},
              {"ph": "X", "name": "not.an.op", "ts": 0.0, "dur": 1.0, "args": args},
              {"ph": "X", "name": "moe.dispatch", "ts": 0.0, "dur": 1.0, "args": {"kind": "comm", "size": 1}}]
    (s,) = samples_from_ours(events)
    assert (s.op, s.phase, s.kind, s.dtype, s.size, s.work, s.overlap, s.held_sms, s.layer, s.label) == (
        "moe.dispatch", "bwd", "comm", "fp8", 1e6, 2e6, 0.25, 20, 3, "x")
    assert s.seconds == pytest.approx(250e-6) and s.start_s == pytest.approx(1.5e-3)


@pytest.mark.parametrize("bad, message", [
    ({"size": 0}, "size and work must be positive"),
    ({"work": -1.0}, "size and work must be positive"),
    ({"held_sms": -1}, "held_sms must be a count of SMs"),
    ({"held_sms": (1 << 16) + 1}, "held_sms must be a count of SMs"),
    ({"kind": "dance"}, "unknown kind 'dance'"),
    ({"overlap": "lots"}, "args size/work/overlap/held_sms/layer must be numbers"),
])
def test_our_events_with_bad_args_are_rejected_naming_the_event(bad: dict[str, Any], message: str) -> None:
    """(samples_from_ours) Non-positive size/work, an impossible SM count, an unknown kind or a non-number
    arg is a ConfigError naming the event's index and name."""
    from calibrate.fit import samples_from_ours

    args = {"kind": "gemm", "dtype": "bf16", "size": 1e9, "work": 1e9, **bad}
    events = [{"ph": "X", "name": "attn.o_proj", "ts": 0.0, "dur": 1.0, "args": args}]
    with pytest.raises(ConfigError) as err:
        samples_from_ours(events)
    assert str(err.value).startswith("trace event 0 (attn.o_proj): ") and message in str(err.value)
    held_ok = {**args, "held_sms": 1 << 16} if "held_sms" in bad else None
    if held_ok is not None:
        assert samples_from_ours([{**events[0], "args": held_ok}])[0].held_sms == 1 << 16


# ---------------------------------------------------------------- calibrate.compare


def _two_stream_reading() -> Any:
    """A gemm on compute stream 7 and a dispatch on comm stream 20, both starting at 0 with no phase chain
    between them, plus a memory kernel on the comm stream."""
    from calibrate.fit import Sample
    from calibrate.rules import TraceReading

    samples = [Sample("attn.o_proj", "fwd", "gemm", "bf16", 1e11, 1e11, 2e-4, start_s=0.0, label="o_proj",
                      stream="7"),
               Sample("moe.dispatch", "fwd", "comm", "fp8", 3e6, 3e6, 3e-4, start_s=0.0, label="a2a", stream="20"),
               Sample("misc", "fwd", "mem", "-", 1.0, 1.0, 1e-5, start_s=4e-4, label="copy", stream="20")]
    return TraceReading(kernels=[], samples=samples, device="NVIDIA H800", num_sms=132, window_s=5e-4)


def test_compare_runs_comm_stream_kernels_on_the_comm_stream() -> None:
    """(compare_reading) Kernels on a stream that carries comm kernels replay on the comm stream (classified
    comm, beside the compute stream, not after it); the rest replay on the compute stream."""
    from calibrate.compare import compare_reading

    cal = _calibration(comm_rates={"a2a": {"overhead_s": 0.0, "bytes_per_s": 1e10}})
    comp = compare_reading(_two_stream_reading(), cal)
    streams = {label: stream for label, stream, *_ in comp.records}
    assert streams == {"o_proj": "compute", "a2a": "comm", "copy": "comm"}
    spans = {label: (a, b) for label, _s, _p, a, b, _x in comp.records}
    assert spans["a2a"][0] == 0.0 and spans["o_proj"][0] == 0.0  # concurrent, not serialised
    assert spans["a2a"][1] == pytest.approx(3e-4, rel=1e-9)
    gemm = spans["o_proj"][1]
    assert comp.simulated_window_s == pytest.approx(max(gemm, 3e-4) + 1e-5, rel=1e-9)
    assert comp.replayed_busy is not None and comp.replayed_busy.comm_busy_s == pytest.approx(3e-4 + 1e-5, rel=1e-9)


def test_compare_rows_are_keyed_by_op_and_pass_with_measured_and_simulated_times() -> None:
    """(compare_reading) One row per op: ``op.phase`` (gemm, comm) or ``op[mem]``, its kind, measured and
    simulated seconds (comm at the calibration's rate, memory-bound at its op_seconds)."""
    from calibrate.compare import compare_reading

    cal = _calibration(comm_rates={"a2a": {"overhead_s": 0.0, "bytes_per_s": 1e10}}, op_seconds={"copy": 4e-5})
    comp = compare_reading(_two_stream_reading(), cal)
    rows = {r.label: r for r in comp.rows}
    assert set(rows) == {"attn.o_proj.fwd", "moe.dispatch.fwd", "misc[mem]"}
    assert (rows["moe.dispatch.fwd"].kind, rows["moe.dispatch.fwd"].measured_s) == ("comm", 3e-4)
    assert rows["moe.dispatch.fwd"].simulated_s == pytest.approx(3e-4, rel=1e-9)
    assert rows["misc[mem]"].simulated_s == pytest.approx(4e-5, rel=1e-9) and rows["misc[mem]"].kind == "mem"
    assert rows["misc[mem]"].error == pytest.approx(3.0, rel=1e-9)
    assert comp.measured_window_s == 5e-4


def test_compare_of_one_layer_keeps_only_that_layers_rows() -> None:
    """(compare_reading) ``layer=k`` compares only layer k's kernels (the held-out layer), while the replay
    still runs every layer."""
    from calibrate.compare import compare_reading
    from calibrate.fit import Sample
    from calibrate.rules import TraceReading

    samples = [Sample("misc", "fwd", "mem", "-", 1.0, 1.0, t, start_s=i * 1e-3, label="copy", layer=i, stream="7")
               for i, t in enumerate((1e-5, 3e-5))]
    reading = TraceReading([], samples, "NVIDIA H800", 132, 2e-3)
    cal = _calibration()
    (row,) = compare_reading(reading, cal, layer=1).rows
    assert (row.measured_s, row.layers) == (3e-5, 1)
    (both,) = compare_reading(reading, cal).rows
    assert (both.measured_s, both.layers) == (pytest.approx(2e-5), 2)
    assert len(compare_reading(reading, cal, layer=1).records) == 2


def test_simulated_time_of_comm_and_notify_without_a_rate_is_as_measured() -> None:
    """(simulated_time) A comm kind the calibration has no rate for is timed as measured; a notify kernel
    of a kind with a rate row takes its overhead_s, and without one its measured time."""
    from calibrate.compare import simulated_time
    from calibrate.fit import Sample
    from sim.calibration import device_gpu_spec, to_cost_model

    cal = _calibration(comm_rates={"a2a": {"overhead_s": 7e-6, "bytes_per_s": 1e10}})
    gpu = device_gpu_spec(cal)
    costs = to_cost_model(cal, gpu)
    comm = Sample("moe.dispatch", "fwd", "comm", "fp8", 1e6, 1e6, 5e-4, label="other")
    assert simulated_time(comm, cal, costs, gpu) == 5e-4
    assert simulated_time(Sample("x", "fwd", "comm", "fp8", 1e6, 1e6, 5e-4, label="a2a"), cal, costs, gpu) == \
        pytest.approx(1e-4)
    assert simulated_time(Sample("x", "f", "notify", "-", 1.0, 1.0, 3e-5, label="a2a"), cal, costs, gpu) == 7e-6
    assert simulated_time(Sample("x", "f", "notify", "-", 1.0, 1.0, 3e-5, label="b"), cal, costs, gpu) == 3e-5


def _known_comparison() -> Any:
    from calibrate.compare import Comparison, OpRow, WindowBusy

    rows = [OpRow("attn.o_proj.fwd", "gemm", 2e-3, 2.4e-3, 4), OpRow("moe.dispatch.fwd", "comm", 1e-3, 0.9e-3, 4)]
    return Comparison(rows, 10e-3, 9.5e-3, measured_busy=WindowBusy(8e-3, 3e-3, 1e-3, 10e-3),
                      replayed_busy=WindowBusy(7.5e-3, 2.5e-3, 0.5e-3, 9.5e-3))


def test_summary_lines_of_a_known_comparison() -> None:
    """(summary_lines) The table in milliseconds with signed per-op errors, the median |error|, the window
    measured vs simulated with its signed error, and the busy/exposed breakdown of each side given."""
    from calibrate.compare import summary_lines

    lines = summary_lines(_known_comparison())
    assert lines == [
        "op" + " " * 42 + " kind" + " " * 8 + "  measured ms  simulated ms    error",
        "attn.o_proj.fwd" + " " * 29 + " gemm" + " " * 8 + "        2.000         2.400   +20.0%",
        "moe.dispatch.fwd" + " " * 28 + " comm" + " " * 8 + "        1.000         0.900   -10.0%",
        "median |per-op error|: 15.0% over 2 ops",
        "traced window: measured 10.00 ms, simulated 9.50 ms (-5.0%)",
        "window (ms)         measured    replayed",
        "  compute_busy          8.00        7.50",
        "  comm_busy             3.00        2.50",
        "  exposed_comm          1.00        0.50",
        "  span                 10.00        9.50",
    ]


def test_summary_lines_of_chosen_rows_and_no_busy_breakdown() -> None:
    """(summary_lines) ``rows`` picks the rows shown (the median still over all); without a measured
    breakdown no window table follows."""
    from calibrate.compare import Comparison, summary_lines

    full = _known_comparison()
    comp = Comparison(full.rows, 4e-3, 5e-3)
    lines = summary_lines(comp, rows=full.rows[1:])
    assert len(lines) == 4 and lines[1].startswith("moe.dispatch.fwd")
    assert lines[2] == "median |per-op error|: 15.0% over 2 ops"
    assert lines[3] == "traced window: measured 4.00 ms, simulated 5.00 ms (+25.0%)"


def test_comparison_errors_and_dict() -> None:
    """(Comparison, OpRow) Errors are simulated / measured - 1, zero where nothing was measured; the dict
    carries each op, the median |error| and the window with its breakdowns (None where absent)."""
    from calibrate.compare import Comparison, OpRow

    assert OpRow("x", "mem", 0.0, 1e-3, 1).error == 0.0
    assert Comparison([], 0.0, 1.0).window_error == 0.0 and Comparison([], 0.0, 1.0).median_abs_error == 0.0
    d = _known_comparison().to_dict()
    assert [(o["op"], o["error"]) for o in d["ops"]] == [("attn.o_proj.fwd", 0.2), ("moe.dispatch.fwd", -0.1)]
    assert d["median_abs_op_error"] == 0.15
    assert d["window"]["error"] == -0.05 and d["window"]["predicted"] is None
    assert d["window"]["measured"] == {"compute_busy_s": 8e-3, "comm_busy_s": 3e-3, "exposed_comm_s": 1e-3,
                                       "span_s": 10e-3}


def test_window_busy_of_no_kernels_and_of_fully_hidden_comm() -> None:
    """(window_busy) No kernels: all zero; comm entirely under compute: none exposed."""
    from calibrate.compare import window_busy

    assert window_busy([], []).to_dict() == {"compute_busy_s": 0.0, "comm_busy_s": 0.0, "exposed_comm_s": 0.0,
                                             "span_s": 0.0}
    w = window_busy([(1.0, 5.0)], [(2.0, 3.0)])
    assert (w.compute_busy_s, w.comm_busy_s, w.exposed_comm_s, w.span_s) == (4.0, 1.0, 0.0, 4.0)


# ---------------------------------------------------------------- calibrate.rules


def test_misc_memory_samples_carry_their_overlap_with_communication_and_slot_label() -> None:
    """(read_job_trace) A GEMM group whose count does not match the config's slots, and an unclassified
    kernel, become ``misc`` memory samples: dtype "-", size and work 1, their measured time, their fraction
    overlapped by DeepEP kernels, the window's held SMs, and a ``family@phase#n`` label."""
    from calibrate.rules import read_job_trace

    reading = read_job_trace(_job(("dispatch(F)", DISPATCH, 100.0, 100.0, [24, 1, 1], 20),
                                  ("attn(F)", FP8_GEMM, 150.0, 100.0, None, 7),
                                  ("mlp(F)", ELEMENTWISE, 190.0, 40.0, None, 7)))
    misc = sorted((s for s in reading.samples if s.op == "misc"), key=lambda s: s.start_s)
    assert [(s.phase, s.kind, s.dtype, s.size, s.work, s.held_sms, s.layer, s.label, s.stream) for s in misc] == [
        ("attn(F)", "mem", "-", 1.0, 1.0, 24, 0, "gemm.fp8@attn(F)#0", "7"),
        ("mlp(F)", "mem", "-", 1.0, 1.0, 24, 0, "mem.other@mlp(F)#0", "7")]
    assert misc[0].overlap == pytest.approx(0.5, rel=1e-9) and misc[1].overlap == pytest.approx(0.25, rel=1e-9)
    assert misc[0].seconds == pytest.approx(100e-6) and misc[1].seconds == pytest.approx(40e-6)
    assert any("attn(F)/gemm.fp8: 1 kernels, expected 5" in n for n in reading.notes)


def test_deepep_kernels_become_comm_samples_of_the_configured_bytes() -> None:
    """(read_job_trace) A dispatch moves T x nodes_per_token x FP8 bytes per token, a combine the BF16 bytes;
    the sample holds its kernel's grid SMs; backward annotations are bwd samples of the op they annotate."""
    from calibrate.rules import RunShapes, read_job_trace

    sh = RunShapes()
    reading = read_job_trace(_job(("dispatch(F)", DISPATCH, 100.0, 50.0, [24, 1, 1], 20),
                                  ("dispatch(B)", COMBINE, 300.0, 60.0, [30, 1, 1], 20)))
    comm = sorted((s for s in reading.samples if s.kind == "comm"), key=lambda s: s.start_s)
    assert [(s.op, s.phase, s.dtype, s.held_sms, s.overlap, s.label) for s in comm] == [
        (ops.MOE_DISPATCH, "fwd", "fp8", 24, 0.0, "deepep.dispatch.fwd"),
        (ops.MOE_DISPATCH, "bwd", "bf16", 30, 0.0, "deepep.combine.bwd")]
    assert comm[0].work == comm[0].size == pytest.approx(4096 * 3.63 * 7392.0)
    assert comm[1].work == pytest.approx(sh.T * sh.nodes_per_token * sh.combine_bytes_per_token)
    assert reading.window_s == pytest.approx(260e-6)


def test_notify_kernels_become_one_notify_sample_per_phase_with_a_main_kernel() -> None:
    """(read_job_trace) The notify kernels of a phase that has a DeepEP dispatch/combine are one notify
    sample (their summed time, labelled with that kind); notify kernels alone in a phase give none."""
    from calibrate.rules import read_job_trace

    events = _job(("dispatch(F)", NOTIFY, 100.0, 5.0, None, 20), ("dispatch(F)", NOTIFY, 110.0, 7.0, None, 20),
                  ("dispatch(F)", DISPATCH, 130.0, 50.0, [24, 1, 1], 20), ("combine(F)", NOTIFY, 400.0, 9.0, None, 20))
    # one dispatch(F) annotation around the first three kernels (one layer), not one each
    events = [e for e in events if not (e["cat"] == "user_annotation" and e["name"] == "dispatch(F)")]
    events.append({"ph": "X", "cat": "user_annotation", "name": "dispatch(F)", "pid": 0, "tid": 0, "ts": 80.0,
                   "dur": 120.0})
    reading = read_job_trace(events)
    (n,) = [s for s in reading.samples if s.kind == "notify"]
    assert (n.op, n.phase, n.dtype, n.held_sms, n.label) == (ops.A2A_COUNT_EXCHANGE, "dispatch(F)", "-", 0,
                                                             "deepep.dispatch.fwd")
    assert n.seconds == pytest.approx(12e-6) and n.start_s == pytest.approx(100e-6)


def test_kernels_without_a_launch_take_their_streams_previous_phase_and_say_so() -> None:
    """(read_job_trace) A kernel whose launch event is missing takes the phase and layer of the previous
    kernel on its stream, and the reading notes how many there were."""
    from calibrate.rules import read_job_trace

    events = _job(("attn(F)", FP8_GEMM, 100.0, 10.0, None, 7))
    events.append({"ph": "X", "cat": "kernel", "name": ELEMENTWISE, "ts": 500.0, "dur": 5.0, "pid": 0, "tid": 7,
                   "args": {"stream": 7, "correlation": 999}})
    reading = read_job_trace(events)
    late = max(reading.kernels, key=lambda k: k.start_s)
    assert (late.phase, late.layer, late.family) == ("attn(F)", 0, "mem.other")
    assert "1 kernels had no launching runtime event; they take their stream's previous phase" in reading.notes


@pytest.mark.parametrize("name, family", [
    ("FlashAttnBwdPreprocess<128>", "mem.attn"), ("FlashAttnBwdSm90<128>", "attn.bwd"),
    ("void dpsk::ep::intranode::combine<8>", "deepep.combine"), (NOTIFY, "deepep.notify"),
    ("fp8_dptp128c_acc_kernel", "gemm.wgrad_fp8"), ("fused_swiglu_fwd", "mem.act"),
    ("nothing_known", "mem.other"),
])
def test_classify_takes_the_first_rule_that_matches(name: str, family: str) -> None:
    """(classify) The first matching substring rule names the family (pre/post-processing before the attention
    kernel it names); no match is mem.other."""
    from calibrate.rules import classify

    assert classify(name) == family


def test_launch_gaps_of_one_stream() -> None:
    """(launch_gaps) Gaps between consecutive kernels of the stream: the median gap under ``small_s``, the
    count of small gaps, the count and total of larger ones, and the stream's busy time."""
    from calibrate.rules import Kernel, launch_gaps

    def k(start_us: float, dur_us: float, stream: str = "7") -> Kernel:
        return Kernel("k", "gemm.fp8", stream, start_us * 1e-6, dur_us * 1e-6, "attn(F)", 0)

    kernels = [k(0, 10), k(12, 10), k(25, 10), k(39, 10), k(149, 10), k(30, 500, "20")]
    got = launch_gaps(kernels, "7")
    assert got["launch_gap_s"] == pytest.approx(3e-6) and got["small_gaps"] == 3.0
    assert got["large_gaps"] == 1.0 and got["large_gap_total_s"] == pytest.approx(100e-6)
    assert got["busy_s"] == pytest.approx(50e-6)
    assert launch_gaps(kernels, "7", small_s=200e-6)["small_gaps"] == 4.0
    gap = kernels[4].start_s - (kernels[3].start_s + kernels[3].seconds)  # a gap of exactly small_s is large
    assert launch_gaps(kernels, "7", small_s=gap)["large_gaps"] == 1.0


# ---------------------------------------------------------------- calibrate.barrier_fit


def _notify_reading(waits_us: tuple[float, ...], compute_s: float) -> Any:
    from calibrate.rules import Kernel, TraceReading

    kernels = [Kernel("n", "deepep.notify", "20", i * 1e-3, 10e-6 + w * 1e-6, "dispatch(F)", i)
               for i, w in enumerate(waits_us)]
    kernels += [Kernel("g", "gemm.fp8", "7", 0.0, compute_s, "attn(F)", 0),
                Kernel("d", "deepep.dispatch", "20", 0.0, 1.0, "dispatch(F)", 0)]
    return TraceReading(kernels, [], "h800", 132, 1.0)


def test_arrival_cv_is_the_median_wait_over_the_expected_max_of_ep_normals() -> None:
    """(fit_arrival_cv) cv = median(notify - DeepEP's 10 us overhead) / (W x E[max of ep normals]), W the
    non-DeepEP compute per notify; E[max of 2 normals] = 1/sqrt(pi); residuals are each wait / median - 1."""
    from calibrate.barrier_fit import fit_arrival_cv

    got = fit_arrival_cv(_notify_reading((10.0, 20.0, 40.0), 3e-3), ep=2)
    assert got is not None
    cv, res = got
    assert cv == round(20e-6 / (1e-3 / math.sqrt(math.pi)), 4) == 0.0354
    assert res == {"n": 3.0, "median_abs_rel": 0.5, "p10_rel": pytest.approx(-0.4), "p90_rel": pytest.approx(0.8)}
    slower = fit_arrival_cv(_notify_reading((20.0, 40.0, 80.0), 3e-3), ep=2)
    assert slower is not None and slower[0] == round(40e-6 / (1e-3 / math.sqrt(math.pi)), 4)  # twice the waits
    wider = fit_arrival_cv(_notify_reading((10.0, 20.0, 40.0), 3e-3), ep=64)
    assert wider is not None and wider[0] < cv


def test_arrival_cv_needs_notify_kernels_compute_and_more_than_one_rank() -> None:
    """(fit_arrival_cv) None without notify kernels, without compute time, or for an EP group of one."""
    from calibrate.barrier_fit import fit_arrival_cv

    assert fit_arrival_cv(_notify_reading((), 3e-3), ep=2) is None
    assert fit_arrival_cv(_notify_reading((10.0,), 0.0), ep=2) is None
    assert fit_arrival_cv(_notify_reading((10.0,), 3e-3), ep=1) is None
    assert fit_arrival_cv(_notify_reading((10.0,), 3e-3), ep=2) is not None


# ---------------------------------------------------------------- calibrate.steps


@pytest.mark.parametrize("text, value", [(None, None), ("all", "all"), ("0", 0), ("12", 12)])
def test_parse_step_accepts_all_and_step_numbers(text: str | None, value: int | str | None) -> None:
    """(parse_step) None, "all" and a step number are read as such."""
    from calibrate.steps import parse_step

    assert parse_step(text) == value


@pytest.mark.parametrize("text", ["-1", "two", "1.5", ""])
def test_parse_step_rejects_anything_else(text: str) -> None:
    """(parse_step) Anything but "all" or digits is a ConfigError quoting the value."""
    from calibrate.steps import parse_step

    with pytest.raises(ConfigError, match=r"^--step must be all or a ProfilerStep number \(the k of "
                                          rf"ProfilerStep#k\), got {text!r}$"):
        parse_step(text)


def test_profiler_steps_are_host_spans_in_time_order_first_of_a_number() -> None:
    """(profiler_steps) Host ProfilerStep#k spans, ordered by start; a device-side copy is not a step, and a
    repeated number keeps its first span."""
    from calibrate.steps import profiler_steps

    events = [{"ph": "X", "name": "ProfilerStep#9", "ts": 100, "dur": 50},
              {"ph": "X", "name": "ProfilerStep#8", "ts": 10, "dur": 50, "cat": "user_annotation"},
              {"ph": "X", "name": "ProfilerStep#7", "ts": 0, "dur": 5, "cat": "gpu_user_annotation"},
              {"ph": "X", "name": "ProfilerStep#9", "ts": 300, "dur": 50},
              {"ph": "i", "name": "ProfilerStep#1", "ts": 0, "dur": 5},
              {"ph": "X", "name": "ProfilerStep#x", "ts": 0, "dur": 5}]
    assert [(s.number, s.start_us, s.end_us) for s in profiler_steps(events)] == [(8, 10.0, 60.0), (9, 100.0, 150.0)]


def test_split_steps_gives_a_kernel_to_the_step_that_launched_it() -> None:
    """(split_steps) Host events go to the step holding them (outside every step: dropped); a kernel goes to
    the step whose runtime call holds its correlation id, even when it runs during the next step."""
    from calibrate.steps import profiler_steps, split_steps

    events = [{"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 100},
              {"ph": "X", "name": "ProfilerStep#2", "ts": 200, "dur": 100},
              {"ph": "X", "cat": "cuda_runtime", "name": "launch", "ts": 90, "dur": 1, "args": {"correlation": 5}},
              {"ph": "X", "cat": "cuda_runtime", "name": "outside", "ts": 150, "dur": 1, "args": {"correlation": 6}},
              {"ph": "X", "cat": "kernel", "name": "late", "ts": 210, "dur": 5, "args": {"correlation": 5}},
              {"ph": "X", "cat": "kernel", "name": "own", "ts": 220, "dur": 5, "args": {"correlation": 77}},
              {"ph": "X", "cat": "kernel", "name": "early", "ts": -1, "dur": 5, "args": {}}]
    steps = profiler_steps(events)
    parts = split_steps(events, steps)
    assert [[e["name"] for e in p] for p in parts] == [["ProfilerStep#1", "launch", "late"], ["ProfilerStep#2", "own"]]


def _step_events(k: int, t0: float, with_kernel: bool = True) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "ts": t0,
                                     "dur": 1000.0}]
    kernels = _job(("attn(F)", FP8_GEMM, t0 + 100.0, 40.0, None, 7))
    events += [e for e in kernels if with_kernel or e["cat"] != "kernel"]
    return events


def test_read_steps_refuses_when_no_step_is_complete() -> None:
    """(read_steps) When no step has kernels, the default reading refuses, naming the steps and --step."""
    from calibrate.steps import read_steps

    events = _step_events(1, 0.0, with_kernel=False) + _step_events(2, 2000.0, with_kernel=False)
    with pytest.raises(ConfigError, match=r"^x\.json: none of its 2 ProfilerStep spans \(#1, #2\) holds a complete "
                                          r"step \(kernels and every phase annotation\); pick one with --step N$"):
        read_steps(events, source="x.json")
    with pytest.raises(ConfigError, match=r"^x\.json: the chosen step\(s\) hold no GPU kernels \(ProfilerStep#2"):
        read_steps(events, step=2, source="x.json")


def test_read_steps_of_a_single_step_reads_the_whole_trace() -> None:
    """(read_steps) A trace with one step (or none marked) is read whole: the same reading as the job-trace
    reader, with no steps note; naming that one step does the same."""
    from calibrate.rules import read_job_trace
    from calibrate.steps import read_steps

    events = _step_events(4, 0.0)
    for step in (None, "all", 4):
        got = read_steps(events, step=step)
        assert got.notes == read_job_trace(events).notes and len(got.kernels) == 1
        assert not any(n.startswith("steps: ") for n in got.notes)


def test_joined_steps_number_layers_on_and_shift_times_back_to_back() -> None:
    """(read_steps) Joined steps: the second step's layers follow the first's, its kernels start where the
    first step's window ended, and the window is the sum of the steps' windows."""
    from calibrate.steps import read_steps

    events = _step_events(1, 0.0) + _step_events(2, 5000.0)
    reading = read_steps(events, step="all")
    ks = sorted(reading.kernels, key=lambda k: k.start_s)
    assert [k.layer for k in ks] == [0, 1]
    assert ks[0].start_s == 0.0 and ks[1].start_s == pytest.approx(40e-6)
    assert reading.window_s == pytest.approx(80e-6)
    assert reading.notes[0] == "steps: average of 2 complete steps (#1, #2) of 2 (#1, #2)"
    assert read_steps(events).notes[0] == reading.notes[0]  # the default leaves a step out only of three or more


# ---------------------------------------------------------------- calibrate.traces


def test_load_document_returns_events_and_top_level_metadata(tmp_path: Path) -> None:
    """(load_document) The metadata is every top-level key but traceEvents; a bare event list has none."""
    from calibrate.traces import load_document

    ev = [{"ph": "X", "name": "moe.dispatch", "ts": 0, "dur": 5}]
    obj, bare = tmp_path / "a.json", tmp_path / "b.json"
    obj.write_text(json.dumps({"traceEvents": ev, "deviceProperties": [{"name": "NVIDIA H800"}], "x": 1}))
    bare.write_text(json.dumps(ev))
    events, meta = load_document(obj)
    assert events == ev and meta == {"deviceProperties": [{"name": "NVIDIA H800"}], "x": 1}
    assert load_document(bare) == (ev, {})


@pytest.mark.parametrize("event, message", [
    ({"ph": "X", "name": "a", "ts": 0, "dur": 1, "args": [1]}, "traceEvents[0] ('a'): args must be an object"),
    ({"ph": "X", "name": "a", "ts": 0, "dur": 1, "args": {"correlation": [1]}},
     "traceEvents[0] ('a'): args.correlation must be a number, got [1]"),
    ({"ph": "X", "name": "a", "ts": True, "dur": 1}, "traceEvents[0] ('a'): ts must be a finite number, got True"),
])
def test_load_trace_rejects_bad_args_and_boolean_times(tmp_path: Path, event: dict[str, Any], message: str) -> None:
    """(load_trace) args that are not an object, a correlation that is a list, or a boolean time is a
    ConfigError naming the file, the event and the field."""
    from calibrate.traces import load_trace

    path = tmp_path / "t.json"
    path.write_text(json.dumps([event]))
    with pytest.raises(ConfigError) as err:
        load_trace(path)
    assert str(err.value).startswith(f"{path}: {message}")


def test_load_trace_event_limit_is_set_by_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(load_trace) More events than MOESIM_MAX_TRACE_EVENTS is refused, saying the count and the limit;
    exactly the limit is read."""
    from calibrate.traces import load_trace

    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"ph": "i", "name": "a"}] * 3))
    monkeypatch.setenv("MOESIM_MAX_TRACE_EVENTS", "2")
    with pytest.raises(ConfigError, match=r"3 events, more than the limit of 2 \(MOESIM_MAX_TRACE_EVENTS raises it\)"):
        load_trace(path)
    monkeypatch.setenv("MOESIM_MAX_TRACE_EVENTS", "3")
    assert len(load_trace(path)) == 3


def test_op_durations_counts_only_the_names_asked_for() -> None:
    """(op_durations) Only complete events named in ``names`` are measured (seconds; count, total, min, max)."""
    from calibrate.traces import op_durations

    events = [{"ph": "X", "name": "a", "ts": 0, "dur": 10}, {"ph": "X", "name": "a", "ts": 20, "dur": 30},
              {"ph": "X", "name": "b", "ts": 0, "dur": 5}, {"ph": "i", "name": "a", "ts": 0, "dur": 99}]
    stats = op_durations(events, names=["a"])
    assert list(stats) == ["a"]
    a = stats["a"]
    assert (a.count, a.source) == (2, "host")
    assert (a.total_s, a.min_s, a.max_s, a.mean_s) == (pytest.approx(40e-6), pytest.approx(10e-6),
                                                       pytest.approx(30e-6), pytest.approx(20e-6))


# ---------------------------------------------------------------- calibrate.traced_plan


def test_predicted_pair_exposes_only_communication() -> None:
    """(predicted_pair) The predicted window's exposed communication is the sum of the simulation's exposed
    ``comm.*`` entries (positive for the traced DeepSeek plan; host syncs are not communication), its
    compute the sum of the compute entries, its span the simulated time."""
    from calibrate.traced_plan import predicted_pair, traced_run
    from sim.calibration import calibrated_inputs, load_calibration
    from sim.predict import Context, simulate_pair

    cal = load_calibration("h800-deepseek-trace")
    model, cluster, plan, stack = traced_run()
    costs, stack = calibrated_inputs(cal, cluster.gpu, stack)
    res = simulate_pair(Context(model, cluster, plan, costs, stack), ["moe"] * 2, ["moe"] * 2)
    comm = sum(v for k, v in res.exposed_s.items() if k.startswith("comm."))
    assert comm > 0 and sum(res.exposed_s.values()) > comm
    w = predicted_pair(cal, layers=2)
    assert w.exposed_comm_s == pytest.approx(comm, rel=1e-12)
    assert w.compute_busy_s == pytest.approx(sum(res.compute_s.values()), rel=1e-12)
    assert (w.comm_busy_s, w.span_s) == (pytest.approx(res.comm_s), pytest.approx(res.time_s))


# ---------------------------------------------------------------- calibrate.microbench


def test_reference_case_row_of_a_real_tiny_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(run_reference_case) A real one-step CPU run of the smallest case returns a row naming the case, its
    tokens, EP size and model size, its step times (measured_s the least of them) and the run's shapes."""
    pytest.importorskip("torch")
    from calibrate.microbench import _DEBUG, RefCase, run_reference_case

    monkeypatch.setenv("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
    row = run_reference_case(RefCase("tiny", 8, steps=1), tmp_path)
    assert row["ok"], row
    assert {k: row[k] for k in ("case", "tokens", "ep", "dim", "experts", "clock")} == {
        "case": "tiny", "tokens": 8, "ep": 1, "dim": 256, "experts": 8, "clock": "process_time"}
    assert row["model"] == _DEBUG
    assert len(row["step_s"]) == 1 and row["measured_s"] == min(row["step_s"]) > 0
    assert len(row["wall_step_s"]) == 1 and row["shapes"]["T"] == 8
    assert set(row) == {"case", "ok", "tokens", "ep", "dim", "experts", "model", "step_s", "measured_s", "clock",
                        "wall_step_s", "shapes", "versions", "device", "git"}


def test_reference_case_row_for_ep2_and_its_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(run_reference_case) An EP=2 case runs the reference with ``--ep 2`` over all_to_all and its row says
    ep 2; each step is timed by its slowest rank's CPU time; a failed run is a row with ok False and the
    last line of its stderr."""
    import subprocess

    from calibrate import microbench

    seen: list[list[str]] = []

    def fake_run(cmd, **kw):  # type: ignore[no-untyped-def]
        seen.append(cmd)
        prof = Path(cmd[cmd.index("--profile") + 1])
        prof.mkdir(parents=True)
        meta = {"timing": {"step_s_per_rank": [[0.5, 0.4], [0.6, 0.3]], "cpu_step_s_per_rank": [[0.2, 0.1], [0.3, 0.05]]},
                "shapes": {"T": 64}}
        (prof / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(microbench.subprocess, "run", fake_run)
    row = microbench.run_reference_case(microbench.RefCase("c2", 64, ep=2), tmp_path)
    assert (row["ep"], row["tokens"], row["step_s"], row["measured_s"], row["wall_step_s"]) == (
        2, 64, [0.3, 0.1], 0.1, [0.6, 0.4])
    cmd = seen[0]
    assert cmd[cmd.index("--ep") + 1] == "2" and cmd[cmd.index("--dispatch") + 1] == "all_to_all"
    assert cmd[cmd.index("--tokens") + 1] == "64" and cmd[cmd.index("--precision") + 1] == "fp32"

    def failing(cmd, **kw):  # type: ignore[no-untyped-def]
        return subprocess.CompletedProcess(cmd, 1, "", "warning\nRuntimeError: boom\n")

    monkeypatch.setattr(microbench.subprocess, "run", failing)
    assert microbench.run_reference_case(microbench.RefCase("c1", 64), tmp_path / "f") == {
        "case": "c1", "ok": False, "error": "RuntimeError: boom"}


# ---------------------------------------------------------------- calibrate.document


def test_fitted_document_sources_name_the_fitter_module_of_each_fitted_field(tmp_path: Path) -> None:
    """(fit_document) The sources of quantize_bw_eff and mem_bw_eff name calibrate/memory_fit.py, comm's
    names calibrate/barrier_fit.py, and every module a source names exists in this checkout."""
    import re

    from calibrate.document import fit_document
    from calibrate.synthetic import synthetic_trace

    path = tmp_path / "syn.json"
    path.write_text(json.dumps({"traceEvents": synthetic_trace(seed=1, noise=0.0, repeats=2)}), encoding="utf-8")
    src = fit_document([path], gpu="h800", name="t")["sources"]
    assert "(calibrate/memory_fit.py)" in src["quantize_bw_eff"] and "(calibrate/memory_fit.py)" in src["mem_bw_eff"]
    assert "(calibrate/barrier_fit.py)" in src["comm"]
    root = Path(__file__).resolve().parents[2]
    named = {m for text in src.values() for m in re.findall(r"calibrate/\w+\.py", text)}
    assert named == {"calibrate/memory_fit.py", "calibrate/barrier_fit.py"}
    assert all((root / m).is_file() for m in named)
