"""The calibrator takes real captures (issue 30, item 3): multi-step Kineto traces (steps averaged or
picked, and said which), zero-duration kernels, any finite timestamps, self-checks that name the fit."""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from calibrate.document import fit_document
from calibrate.fit import Sample, fit_tables
from calibrate.fit_checks import check_document
from calibrate.steps import profiler_steps, read_steps
from sim.calibration import SCHEMA, VERSION
from sim.catalog import load_gpu
from sim.errors import ConfigError
from tests.job_trace import DEEPEP_DISPATCH, job_events
from tests.robustness.cli import assert_user_error, run_cli
from tests.shared_trace import TRACE, needs_trace

FP8_GEMM = "void cutlass::device_kernel<dpsk::fp8_ptp128c::GemmKernel>"


def _steps(step_events: list[list[dict[str, Any]]], gap_us: float = 1000.0) -> list[dict[str, Any]]:
    """Concatenate copies of one step's events as ProfilerStep#1..N, each after the last; correlation ids
    restart every step (the harder case: a kernel must find its launch in its own step)."""
    out: list[dict[str, Any]] = []
    offset = 0.0
    for k, events in enumerate(step_events, start=1):
        xs = [e for e in events if "ts" in e]
        t0, t1 = min(e["ts"] for e in xs), max(e["ts"] + e.get("dur", 0) for e in xs)
        if not any(str(e.get("name", "")).startswith("ProfilerStep#") for e in events):
            out.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 0, "tid": 0,
                        "ts": offset, "dur": t1 - t0})
        for e in events:
            e2 = dict(e)
            if "ts" in e2:
                e2["ts"] = e2["ts"] - t0 + offset
            if str(e2.get("name", "")).startswith("ProfilerStep#"):  # the capture's own step span, renumbered
                e2["name"] = f"ProfilerStep#{k}"
            out.append(e2)
        offset += t1 - t0 + gap_us
    return out


def _small_step() -> list[dict[str, Any]]:
    return job_events(("attn(F)", FP8_GEMM, 100.0, 40.0, None), ("dispatch(F)", DEEPEP_DISPATCH, 150.0, 30.0, [20, 1, 1]),
                      ("attn(F)", FP8_GEMM, 200.0, 40.0, None))


def test_steps_are_split_by_their_launches_even_when_correlation_ids_repeat() -> None:
    events = _steps([_small_step(), _small_step()])
    assert [s.number for s in profiler_steps(events)] == [1, 2]
    reading = read_steps(events, step="all")
    assert len(reading.kernels) == 6
    # each step's kernels took their own step's phases: layers 0, 1 (step 1) then 2, 3 (step 2)
    assert sorted({(k.phase, k.layer) for k in reading.kernels if k.phase == "attn(F)"}) == [
        ("attn(F)", 0), ("attn(F)", 1), ("attn(F)", 2), ("attn(F)", 3)]
    assert reading.notes[0] == "steps: average of 2 complete steps (#1, #2) of 2 (#1, #2)"
    # the steps are joined back to back: the gap between them is in no window
    one = read_steps(_small_step())
    assert reading.window_s == pytest.approx(2 * one.window_s)
    picked = read_steps(events, step=2)
    assert len(picked.kernels) == 3 and "ProfilerStep#2 (--step 2)" in picked.notes[0]
    with pytest.raises(ConfigError, match=r"--step 7: .* has no ProfilerStep#7 \(its steps: #1, #2\)"):
        read_steps(events, step=7)


def test_default_leaves_the_first_of_three_steps_and_incomplete_steps_out() -> None:
    cut = _small_step()[:-3]  # the capture stopped before the step's last kernel
    events = _steps([_small_step(), _small_step(), _small_step(), cut])
    note = read_steps(events).notes[0]
    assert note == ("steps: average of 2 complete steps (#2, #3, the first (#1) left out) of 4 (#1, #2, #3, #4); "
                    "incomplete, not used: #4")
    assert read_steps(events, step="all").notes[0].startswith("steps: average of 3 complete steps (#1, #2, #3)")


def _deepseek_events() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    events = doc.pop("traceEvents")
    t0 = min(e["ts"] for e in events if "ts" in e)
    for e in events:  # from the trace's start: float spacing at epoch microseconds (0.25 us) blurs launch gaps
        if "ts" in e:
            e["ts"] -= t0
    return events, doc


def _write(path: Path, events: list[dict[str, Any]], meta: Mapping[str, Any]) -> Path:
    path.write_text(json.dumps({**meta, "traceEvents": events}))
    return path


def _numbers(doc: Any, prefix: str = "") -> dict[str, float]:
    if isinstance(doc, Mapping):
        return {k: v for key, val in doc.items() if key not in ("residuals", "provenance", "notes", "sources")
                for k, v in _numbers(val, f"{prefix}.{key}").items()}
    if isinstance(doc, list):
        return {k: v for i, val in enumerate(doc) for k, v in _numbers(val, f"{prefix}[{i}]").items()}
    if isinstance(doc, int | float) and not isinstance(doc, bool):
        return {prefix: float(doc)}
    return {}


@needs_trace
def test_a_two_step_trace_fits_within_2_percent_of_the_one_step_fit(tmp_path: Path) -> None:
    events, meta = _deepseek_events()
    one = fit_document([_write(tmp_path / "one.json", events, meta)])
    two_path = _write(tmp_path / "two.json", _steps([copy.deepcopy(events), copy.deepcopy(events)]), meta)
    for step, how in ((None, "average of 2 complete steps (#1, #2)"), (2, "ProfilerStep#2 (--step 2)")):
        two = fit_document([two_path], step=step)
        a, b = _numbers(one), _numbers(two)
        assert a.keys() == b.keys()
        worst = max((abs(b[k] / a[k] - 1), k) for k in a if a[k] and not k.endswith(".samples"))
        assert worst[0] < 0.02, worst
        assert how in two["provenance"]["sources"][0] and any(how in n for n in two["notes"])


@needs_trace
def test_zero_duration_gemm_kernels_are_left_out_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events, meta = _deepseek_events()
    zeroed = 0
    for e in events:
        if e.get("cat") == "kernel" and "fp8_ptp128c" in e.get("name", "") and zeroed < 12 and e["dur"] > 0:
            e["dur"] = 0
            zeroed += 1
    path = _write(tmp_path / "zero.json", events, meta)
    doc = fit_document([path])
    assert f"{zeroed} zero-duration kernels (gemm 8, grouped_gemm 4) carry no rate: left out of the rate fits" in doc["notes"]
    assert doc["gemm_eff"]["fp8"]["values"]
    code, out, err = run_cli(["calibrate", "compare", str(path), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["window"]["measured_s"] > 0


def test_zero_duration_samples_never_divide_by_zero() -> None:
    gemm = [Sample("attn.q_proj", phase, "gemm", "fp8", 1e10, 1e10, secs)
            for phase, secs in (("fwd", 2e-5), ("fwd", 2e-5), ("dgrad", 0.0), ("wgrad", 0.0))]
    attn = [Sample("attn.core", "fwd", "attn", "bf16", 1e10, 1e10, 0.0)]
    comm = [Sample("moe.dispatch", "fwd", "comm", "fp8", 1e6, 1e6, 0.0, label="deepep.dispatch.fwd")]
    tables = fit_tables(gemm + attn + comm, load_gpu("h800"))
    assert tables["gemm_eff"]["fp8"]["values"] and "attn_fwd_eff" not in tables and "comm_rates" not in tables


def _huge_clock_trace(tmp_path: Path) -> Path:
    events = job_events(("attn(F)", FP8_GEMM, 100.0, 40.0, None), ("dispatch(F)", DEEPEP_DISPATCH, 150.0, 30.0, None))
    for e in events:
        e["ts"] += 1e300
    return _write(tmp_path / "huge.json", events, {"deviceProperties": [{"name": "NVIDIA H800"}]})


@pytest.mark.parametrize("command", ["fit", "compare"])
def test_timestamps_near_1e300_are_refused_with_the_reason_and_write_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    trace = _huge_clock_trace(tmp_path)
    out = tmp_path / "out.json"
    argv = ["calibrate", command, str(trace), "--out" if command == "fit" else "--sim-trace", str(out)]
    assert_user_error(run_cli(argv, capsys), str(trace), "timestamps near 1e+300 us", "median kernel")
    assert not out.exists()


@needs_trace
def test_compare_writes_its_simulated_trace_only_once_it_can_finish(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import calibrate.compare

    def fails(*_args: object, **_kw: object) -> list[str]:
        raise ConfigError("late failure")

    monkeypatch.setattr(calibrate.compare, "summary_lines", fails)
    out = tmp_path / "sim.json"
    assert_user_error(run_cli(["calibrate", "compare", str(TRACE), "--calibration", "h800-deepseek-trace",
                               "--sim-trace", str(out)], capsys), "late failure")
    assert not out.exists()


@needs_trace
def test_a_fit_that_fails_its_self_check_names_the_fit_not_the_output(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    events, meta = _deepseek_events()
    for e in events:  # every GEMM at zero: only the attention kernels are left to fit SM sharing from
        if e.get("cat") == "kernel" and ("fp8" in e.get("name", "") or "gemm" in e.get("name", "").lower()):
            e["dur"] = 0
    trace = _write(tmp_path / "odd.json", events, meta)
    out = tmp_path / "cal.json"
    message = assert_user_error(run_cli(["calibrate", "fit", str(trace), "--out", str(out)], capsys),
                                f"the fit of {trace}", "SM-sharing slowdown", "is negative",
                                "overlapped kernels ran faster than alone")
    assert str(out) not in message and not out.exists()


def test_self_checks_name_the_fitted_value() -> None:
    doc = {"schema": SCHEMA, "version": VERSION, "name": "x", "gpu": "h800", "provenance": {},
           "sm_sharing": {"comm_sms": 20.0, "model_slowdown": 0.18, "fitted_slowdown": -0.63, "samples": 8.0}}
    with pytest.raises(ConfigError, match=r"the fit of t\.json: the fitted SM-sharing slowdown -0\.63 is negative"):
        check_document(doc, "t.json")
    with pytest.raises(ConfigError, match=r"the fit of t\.json: the fitted mem_bw_eff is 0"):
        check_document({**doc, "sm_sharing": {}, "mem_bw_eff": 0.0}, "t.json")
    with pytest.raises(ConfigError, match=r"the fit of t\.json: the fitted DeepEP in-training slowdown -0\.9 is negative"):
        check_document({**doc, "sm_sharing": {}, "comm": {"overlap_kernel_slowdown": -0.9}}, "t.json")
