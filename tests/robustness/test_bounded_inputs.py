"""Bounded inputs and errors that help (issue 30, items 1 and 4).

Every file input is a regular file read no further than a stated limit (:mod:`sim.fileio`,
:mod:`sim.limits`): ``/dev/zero``, a named pipe and a gzip bomb are refused at once with exit 2; worker,
microbatch and capacity-point counts are bounded before any work; ``--json`` is strict JSON; an internal
error names its ``file:line`` and ``MOESIM_DEBUG=1``; the reference refuses a layer larger than RAM.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from moesim.cli import terminal_safe
from sim.errors import ConfigError
from sim.fileio import read_input, read_trace
from tests.robustness.cli import assert_user_error, run_cli

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["predict", "--model", "debug", "--gpus", "8", "--ep", "4"]


def _moesim(argv: list[str], timeout_s: float = 30.0, **env: str) -> tuple[int, str, str, float]:
    """``python -m moesim ARGV`` as a user runs it: (exit code, stdout, stderr, seconds); a hang fails."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "moesim", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout_s, stdin=subprocess.DEVNULL,
                          env={**os.environ, "TORCHAO_FORCE_SKIP_LOADING_SO_FILES": "1", **env})
    return proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start


def _one_error_line(stderr: str, *needles: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in stderr, stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# --- special files ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--model", "--calibration"])
def test_dev_zero_is_refused_at_once(flag: str) -> None:
    code, out, err, seconds = _moesim([*SMALL, flag, "/dev/zero"])
    assert code == 2, err
    _one_error_line(err, "/dev/zero", "character device", "not a regular file")
    assert not out and seconds < 20


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "model.toml"
    os.mkfifo(fifo)
    code, out, err, _ = _moesim([*SMALL, "--model", str(fifo)], timeout_s=30.0)  # a hang raises TimeoutExpired
    assert code == 2 and not out
    _one_error_line(err, str(fifo), "named pipe (FIFO)")


def test_a_folder_and_a_fifo_as_calibration_are_user_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_user_error(run_cli([*SMALL, "--calibration", str(tmp_path)], capsys), str(tmp_path), "a directory")
    fifo = tmp_path / "cal.json"
    os.mkfifo(fifo)
    assert_user_error(run_cli([*SMALL, "--calibration", str(fifo)], capsys), "named pipe (FIFO)")


def test_an_oversized_input_names_its_limit_and_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "model.toml"
    with open(big, "wb") as handle:
        handle.write(b"# a model\n")
        handle.truncate(1_000_001)  # sparse: one byte over a 1 MB limit
    monkeypatch.setenv("MOESIM_MAX_INPUT_MB", "1")
    assert_user_error(run_cli([*SMALL, "--model", str(big)], capsys), "1 MB limit", "MOESIM_MAX_INPUT_MB")
    monkeypatch.setenv("MOESIM_MAX_INPUT_MB", "2")
    message = assert_user_error(run_cli([*SMALL, "--model", str(big)], capsys))
    assert "limit" not in message  # under the raised limit the file is read (and refused for its content)
    monkeypatch.setenv("MOESIM_MAX_INPUT_MB", "-3")
    assert_user_error(run_cli([*SMALL, "--model", str(big)], capsys), "MOESIM_MAX_INPUT_MB must be an integer")


def _bomb(path: Path, inflated_mb: int) -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with open(path, "wb") as handle:
        for _ in range(inflated_mb):
            handle.write(packer.compress(bytes(1 << 20)))
        handle.write(packer.flush())


def test_a_gzip_bomb_trace_stops_at_the_limit(tmp_path: Path) -> None:
    bomb = tmp_path / "trace.json.gz"
    _bomb(bomb, 24)
    assert bomb.stat().st_size < 100_000
    code, out, err, seconds = _moesim(["calibrate", "fit", str(bomb), "--out", str(tmp_path / "cal.json")],
                                      MOESIM_MAX_TRACE_MB="8")
    assert code == 2 and not out, err
    _one_error_line(err, "8 MB limit", "decompressed", "MOESIM_MAX_TRACE_MB")
    assert not (tmp_path / "cal.json").exists() and seconds < 20


def test_read_trace_inflates_members_and_refuses_truncation(tmp_path: Path) -> None:
    doc = json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": i, "dur": 1} for i in range(500)]}).encode()
    two = tmp_path / "two.json.gz"
    two.write_bytes(gzip.compress(doc[:700]) + gzip.compress(doc[700:]) + bytes(8))  # two members, zero padding
    assert read_trace(two) == doc
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(doc)[:-12])
    with pytest.raises(ConfigError, match="truncated or corrupt gzip"):
        read_trace(cut)
    plain = tmp_path / "plain.json"
    plain.write_bytes(doc)
    assert read_trace(plain) == doc == read_input(plain)


def test_too_many_trace_events_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from calibrate.traces import load_trace

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "i", "name": "e", "ts": i} for i in range(11)]}))
    monkeypatch.setenv("MOESIM_MAX_TRACE_EVENTS", "10")
    with pytest.raises(ConfigError, match="11 events, more than the limit of 10 .*MOESIM_MAX_TRACE_EVENTS"):
        load_trace(path)
    monkeypatch.setenv("MOESIM_MAX_TRACE_EVENTS", "11")
    assert len(load_trace(path)) == 11


# --- counts bounded before any work ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "0", "1e20", "99999"])
def test_plan_and_study_workers_are_bounded(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["plan", "--model", "debug", "--tokens", "1e9", "--days", "1", "--workers", value],
                 ["study", "capacity", "--out", "never-made", "--workers", value]):
        code, out, err = run_cli(argv, capsys)
        assert code == 2 and not out, err
        assert "--workers" in err and len(err.strip().splitlines()) == 1
    assert not Path("never-made").exists()


def test_workers_limit_follows_the_cores_and_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from sim.limits import check_workers, max_workers

    monkeypatch.delenv("MOESIM_MAX_WORKERS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert max_workers() == 8
    with pytest.raises(ConfigError, match=r"1\.\.8 .*MOESIM_MAX_WORKERS"):
        check_workers("--workers", 64)
    monkeypatch.setenv("MOESIM_MAX_WORKERS", "64")
    assert check_workers("--workers", 64) == 64


def test_trace_microbatches_are_bounded(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    many = ",".join(str(i) for i in range(33))
    trace = tmp_path / "t.json"
    assert_user_error(run_cli([*SMALL, "--trace", str(trace), "--trace-microbatches", many], capsys),
                      "at most 32 microbatches", "MOESIM_MAX_TRACE_MICROBATCHES")
    assert not trace.exists()


def test_capacity_points_are_counted_before_expansion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    counts = ", ".join(str(8 * i) for i in range(1, 401))
    nics = ", ".join(str(100 + i) for i in range(200))
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[[sweep]]\nmodels = ["debug"]\ngpus = ["b200"]\ngpu_counts = [{counts}]\n'
                    f"nic_gbps = [{nics}]\n", encoding="utf-8")
    start = time.perf_counter()
    out = tmp_path / "out"
    assert_user_error(run_cli(["study", "capacity", "--spec", str(spec), "--out", str(out)], capsys),
                      "80000 points", "limit of 50000", "MOESIM_MAX_CAPACITY_POINTS")
    assert time.perf_counter() - start < 5 and not out.exists()


# --- outputs -------------------------------------------------------------------------------------------------


def _strict(text: str) -> object:
    def refuse(token: str) -> object:
        raise AssertionError(f"{token} in --json output")

    return json.loads(text, parse_constant=refuse)


def test_a_stack_without_validation_runs_prints_strict_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The deepseek stack and a user's stack file have no measured runs: their interval is the widest (from the
    leave-one-group-out residuals, by distance from the evidence), finite, and the JSON never holds ``Infinity``."""
    def finite_interval(doc: object) -> None:
        assert isinstance(doc, dict)
        for p in doc["predictions"]:
            iv = p["interval"]
            assert iv is not None and 0 < iv["p10_tokens_per_s_per_gpu"] < iv["p90_tokens_per_s_per_gpu"]
            assert iv["distance"] != "measured group"

    for extra in ([], ["--ep-backend", "deepep"]):  # issue 30 Must-show 5 is the first
        code, out, err = run_cli([*SMALL, "--stack", "deepseek", *extra, "--json"], capsys)
        assert code == 0, err
        finite_interval(_strict(out))
    stack = tmp_path / "mine.toml"
    stack.write_text('[stack]\nbase = "torchtitan"\nname = "mine"\n', encoding="utf-8")
    code, out, err = run_cli([*SMALL, "--stack", str(stack), "--json"], capsys)
    assert code == 0, err
    finite_interval(_strict(out))


def test_interval_dict_has_no_infinity() -> None:
    from sim.uncertainty import interval

    iv = interval(100.0, [], calibration_sd=0.0)  # no evidence at all: unbounded above
    assert iv.p90 == float("inf")
    assert iv.to_dict()["p90_tokens_per_s_per_gpu"] is None
    _strict(json.dumps(iv.to_dict(), allow_nan=False))


def test_dash_outputs_never_mix_documents(capsys: pytest.CaptureFixture[str]) -> None:
    assert_user_error(run_cli([*SMALL, "--trace", "-", "--json"], capsys), "--trace - and --json")
    code, out, err = run_cli([*SMALL, "--trace", "-"], capsys)
    assert code == 0 and json.loads(out)["traceEvents"]  # stdout holds the trace alone
    assert "tok/s/GPU" in err  # the report went to stderr


def test_text_output_is_terminal_safe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sim.calibration import bundled_path

    doc = json.loads(bundled_path("b200-published").read_text(encoding="utf-8"))
    doc["name"] = "x\udcff\x1b[2Jy"
    cal = tmp_path / "c.json"
    cal.write_text(json.dumps(doc), encoding="utf-8")  # ensure_ascii: the surrogate as \udcff in the file
    code, out, err = run_cli(["calibrate", "show", str(cal)], capsys)
    assert code == 0, err
    assert "x\\udcff\\x1b[2Jy" in out and "\x1b" not in out
    assert terminal_safe("ok\ttab\nline") == "ok\ttab\nline"


# --- errors that help ------------------------------------------------------------------------------------------


def test_moesim_debug_is_documented_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0 and "MOESIM_DEBUG=1" in out and "MOESIM_MAX_INPUT_MB" in out
    assert "MOESIM_DEBUG=1" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_an_internal_error_names_its_location(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import moesim.cli

    def broken() -> list[str]:
        return [][1]  # the bug

    monkeypatch.delenv("MOESIM_DEBUG", raising=False)
    monkeypatch.setattr(moesim.cli, "model_names", broken)
    code, out, err = run_cli(["catalog", "models"], capsys)
    assert code == 70 and not out
    line = err.strip()
    assert len(line.splitlines()) == 1 and "internal error" in line and "IndexError" in line
    assert "test_bounded_inputs.py:" in line and "in broken" in line and "MOESIM_DEBUG=1" in line
    monkeypatch.setenv("MOESIM_DEBUG", "1")
    with pytest.raises(IndexError):
        moesim.cli.main(["catalog", "models"])


def test_a_version1_reader_bug_is_not_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from sim.catalog import load_gpu
    from sim.costs import CostModel, default_costs

    v1 = tmp_path / "v1.json"
    v1.write_text(default_costs(load_gpu("b200")).to_json(), encoding="utf-8")
    code, _, err = run_cli([*SMALL, "--calibration", str(v1)], capsys)
    assert code == 0, err

    def buggy(_text: str) -> CostModel:
        raise TypeError("a bug in the reader")

    monkeypatch.delenv("MOESIM_DEBUG", raising=False)
    monkeypatch.setattr(CostModel, "from_json", staticmethod(buggy))
    code, _, err = run_cli([*SMALL, "--calibration", str(v1)], capsys)
    assert code == 70 and "internal error" in err and "TypeError" in err
    v1.write_text('{"version": 1, "gpu": "b200", "gemm_eff": [1]}', encoding="utf-8")
    assert_user_error(run_cli([*SMALL, "--calibration", str(v1)], capsys), "gemm_eff must be an object")


# --- the reference ---------------------------------------------------------------------------------------------


def test_the_reference_refuses_a_layer_larger_than_ram(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from reference import run
    from reference.errors import ConfigError as ReferenceError
    from sim.catalog import load_model

    need = run.estimate_memory_bytes(load_model("deepseek-v3-671b"), 3, 1, 256, 256, 2)
    assert need > 40e9  # 11.3 B routed-expert parameters, weights and gradients in bf16
    assert run.estimate_memory_bytes(load_model("debug"), 1, 2, 256, 256, 2) < 1e9
    monkeypatch.setattr(run, "available_memory_bytes", lambda: 23 * 2**30)
    with pytest.raises(ReferenceError, match=r"needs about .* GiB .* more than the 23\.0 GiB"):
        run.check_memory(need, 1)
    run.check_memory(need // 4, 1)
    monkeypatch.setenv("MOESIM_REFERENCE_MEMORY_CHECK", "0")
    run.check_memory(need, 1)


def test_the_reference_meets_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from reference import run

    monkeypatch.delenv("MOESIM_RENDEZVOUS_ADDR", raising=False)
    assert run.rendezvous_addr() == "127.0.0.1"
    monkeypatch.setenv("MOESIM_RENDEZVOUS_ADDR", "10.0.0.7")
    assert run.rendezvous_addr() == "10.0.0.7"
