"""The trace reader measures shared-vocabulary ranges, preferring device spans."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from calibrate.traces import load_trace, op_durations
from sim.errors import ConfigError


def event(name: str, cat: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 0, "tid": 0}


def test_device_spans_win_over_host_spans(tmp_path: Path) -> None:
    events = [event("moe.expert_gemm", "user_annotation", 0, 100), event("moe.expert_gemm", "gpu_user_annotation", 5, 40),
              event("moe.expert_gemm", "gpu_user_annotation", 200, 60), event("attn.core", "user_annotation", 0, 7),
              event("not.an.op", "user_annotation", 0, 1), {"ph": "B", "name": "moe.dispatch"}]
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    stats = op_durations(load_trace(path))
    assert set(stats) == {"moe.expert_gemm", "attn.core"}
    gemm = stats["moe.expert_gemm"]
    assert (gemm.count, gemm.source) == (2, "device")
    assert gemm.total_s == pytest.approx(100e-6)
    assert (gemm.min_s, gemm.max_s) == (pytest.approx(40e-6), pytest.approx(60e-6))
    assert stats["attn.core"].source == "host"


def test_bad_trace_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not a readable JSON trace"):
        load_trace(path)
    result = subprocess.run([sys.executable, "-m", "calibrate", "summarize", str(path)], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr


@pytest.mark.parametrize("blob, needle", [
    (gzip.compress(b'{"traceEvents": []}')[:12], "truncated or corrupt gzip"),
    (b"\x1f\x8b" + b"\x00" * 30, "gzip"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (json.dumps([{"ph": "X", "name": ["a"], "ts": 0, "dur": 1}]).encode(), "name must be a string"),
    (json.dumps([{"ph": "X", "name": "a", "ts": 0, "dur": "5"}]).encode(), "dur must be a finite number, got '5'"),
    (json.dumps([{"ph": "X", "name": "a", "ts": 0, "dur": None}]).encode(), "missing dur"),
    (json.dumps([{"ph": "X", "name": "a", "ts": 0, "dur": -2}]).encode(), "negative duration -2"),
    (json.dumps([{"ph": "X", "name": "a", "ts": -3.5, "dur": 2}]).encode(), "negative timestamp ts -3.5"),
    (b'[{"ph": "X", "name": "a", "ts": 0, "dur": NaN}]', "not a readable JSON trace"),
    (json.dumps([{"ph": "X", "name": "a", "ts": 0}]).encode(), "missing dur"),
    (json.dumps({"traceEvents": 3}).encode(), "expected a 'traceEvents' list"),
    (json.dumps([3]).encode(), "traceEvents[0] must be an object"),
])
def test_malformed_traces_are_one_clear_error(tmp_path: Path, blob: bytes, needle: str) -> None:
    path = tmp_path / ("t.json.gz" if blob[:2] == b"\x1f\x8b" else "t.json")
    path.write_bytes(blob)
    with pytest.raises(ConfigError) as err:
        load_trace(path)
    assert needle in str(err.value)


@pytest.mark.parametrize("command", [["calibrate", "fit", "{t}", "--out", "{o}"], ["calibrate", "compare", "{t}"]])
def test_fit_and_compare_refuse_negative_timestamps(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    command: list[str]) -> None:
    from tests.robustness.cli import assert_user_error, run_cli

    trace = tmp_path / "t.json"
    trace.write_text(json.dumps([{"ph": "X", "name": "moe.dispatch", "cat": "user_annotation", "ts": 5, "dur": 3},
                                 {"ph": "X", "name": "moe.combine", "cat": "user_annotation", "ts": -1, "dur": 2}]))
    out = tmp_path / "cal.json"
    argv = [a.format(t=trace, o=out) for a in command]
    assert_user_error(run_cli(argv, capsys), str(trace), "traceEvents[1]", "negative timestamp")
    assert not out.exists()
