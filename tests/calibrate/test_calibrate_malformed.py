"""Property test: malformed traces and calibration files exit 2 with one message, never a traceback."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moesim.cli import main

GOOD_EVENT = {"ph": "X", "name": "moe.dispatch", "cat": "kernel", "ts": 0, "dur": 5,
              "args": {"kind": "comm", "dtype": "bf16", "size": 10, "work": 10}}

def _valid_pair(v: Any, key: str) -> bool:
    """Two integers that make a valid curve's ``key`` (sizes: positive, increasing; values: in (0, 1.5])."""
    if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
        return False
    if key == "sizes":
        return 0 < v[0] < v[1]
    return all(0 < x <= 1.5 for x in v)


bad_values = st.one_of(st.none(), st.text(max_size=5), st.lists(st.integers(), max_size=2),
                       st.just(float("nan")), st.just(-1.0), st.just(float("inf")), st.booleans(),
                       st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@st.composite
def bad_trace(draw: Any) -> bytes:
    kind = draw(st.sampled_from(["field", "missing", "truncated_gzip", "corrupt_gzip", "deep", "top", "garbage"]))
    if kind == "field":
        event = dict(GOOD_EVENT)
        event[draw(st.sampled_from(["name", "ts", "dur", "args"]))] = draw(bad_values)
        if isinstance(event["name"], str) and event["name"] and isinstance(event.get("dur"), int | float) \
                and not isinstance(event["dur"], bool) and event["dur"] == event["dur"] and event["dur"] >= 0 \
                and abs(event["dur"]) != float("inf") and isinstance(event.get("args"), dict | None):
            event["dur"] = -3  # keep it malformed
        text = json.dumps({"traceEvents": [GOOD_EVENT, event]})
        return text.encode()
    if kind == "missing":
        event = dict(GOOD_EVENT)
        del event[draw(st.sampled_from(["ts", "dur"]))]
        return json.dumps([event]).encode()
    if kind == "truncated_gzip":
        blob = gzip.compress(json.dumps({"traceEvents": [GOOD_EVENT] * 50}).encode())
        return blob[: draw(st.integers(2, len(blob) - 1))]
    if kind == "corrupt_gzip":
        blob = bytearray(gzip.compress(json.dumps({"traceEvents": [GOOD_EVENT] * 50}).encode()))
        i = draw(st.integers(10, len(blob) - 9))
        blob[i] ^= 0xFF
        blob[i + 1] ^= 0x55
        return bytes(blob)
    if kind == "deep":
        n = draw(st.sampled_from([1000, 100_000]))
        return ("[" * n + "]" * n).encode()
    if kind == "top":
        return json.dumps(draw(st.one_of(st.integers(), st.text(max_size=4), st.just({"traceEvents": 3})))).encode()
    return draw(st.binary(min_size=1, max_size=40)).replace(b"[", b"").replace(b"{", b"") or b"x"


@st.composite
def bad_calibration(draw: Any) -> bytes:
    base = {"schema": "moesim.calibration", "version": 2, "name": "c", "gpu": "h800", "provenance": {"method": "t"},
            "gemm_eff": {"fp8": {"sizes": [1e9, 1e12], "values": [0.3, 0.6]}}, "attn_fwd_eff": 0.5}
    kind = draw(st.sampled_from(["value", "version", "curve", "deep", "truncated", "unknown"]))
    if kind == "value":
        not_str = st.one_of(st.none(), st.integers(), st.just(""), st.lists(st.text(max_size=2), max_size=2))
        not_num = st.one_of(st.none(), st.text(max_size=3), st.booleans(), st.just(float("nan")),
                            st.floats(max_value=0), st.floats(min_value=1.6, allow_infinity=True), st.lists(st.integers()))
        not_obj = st.one_of(st.none(), st.integers(), st.text(max_size=3), st.lists(st.integers(), max_size=2))
        field = draw(st.sampled_from(["attn_fwd_eff", "name", "gpu", "provenance", "gemm_eff", "comm"]))
        base[field] = draw({"attn_fwd_eff": not_num, "name": not_str, "gpu": not_str}.get(field, not_obj))
    elif kind == "version":
        base["version"] = draw(st.one_of(st.integers(-3, 1), st.integers(3, 9), st.text(max_size=2), st.none()))
    elif kind == "curve":
        key = draw(st.sampled_from(["sizes", "values"]))
        base["gemm_eff"]["fp8"][key] = draw(
            st.one_of(st.lists(st.floats(allow_nan=False, allow_infinity=False, max_value=0), min_size=2, max_size=2),
                      st.lists(st.text(max_size=2), min_size=2, max_size=2), st.just([]),
                      bad_values.filter(lambda v: not _valid_pair(v, key))))
    elif kind == "deep":
        return ('{"a":' * 100_000 + "1" + "}" * 100_000).encode()
    elif kind == "truncated":
        text = json.dumps(base)
        return text[: draw(st.integers(1, len(text) - 1))].encode()
    else:
        base[draw(st.text(min_size=1, max_size=6).filter(lambda k: k not in base))] = 1
    return json.dumps(base).encode()  # NaN / inf become JSON's non-standard tokens, which must be refused


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=bad_trace())
def test_malformed_traces_exit_2_with_one_message(blob: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(blob)
    out = tmp_path / "cal.json"
    code, err = run_cli(capsys, "calibrate", "fit", str(path), "--out", str(out), "--gpu", "h800")
    assert code == 2, err
    assert err.count("\n") == 1 and "error:" in err and "Traceback" not in err
    assert not out.exists()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=bad_calibration())
def test_malformed_calibrations_exit_2_with_one_message(blob: bytes, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(blob)
    code, err = run_cli(capsys, "calibrate", "show", str(path))
    assert code == 2, err
    assert err.count("\n") == 1 and "error:" in err and "Traceback" not in err
    code, err = run_cli(capsys, "predict", "--calibration", str(path))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
