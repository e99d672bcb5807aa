"""Interrupts keep work (issue 30, item 2): a signalled sweep records every finished point and leaves no
process and no temporary file; one sweep per folder; write_atomic never leaves its .tmp; an output that
is an input is refused; the reference never deletes a ``.partial`` it did not create and stops its ranks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from studies.capacity import read_results, run_sweep
from studies.capacity_spec import load_spec
from studies.folder_lock import LOCK_NAME, folder_lock
from tests.robustness.cli import assert_user_error, run_cli

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))

#: 3 GPUs x 4 counts x 2 NICs = 24 points, each a small plan search (~0.05-0.2 s on one core).
SPEC = """
[capacity]
tokens = 1e11
[[sweep]]
models = ["deepseek-v3-16b"]
gpus = ["b200", "b300", "gb200"]
gpu_counts = [64, 128, 256, 512]
nic_gbps = [400, 800]
seq_len = 2048
global_batch = 512
[search]
tp = [1]
pp = [1, 2]
schedules = ["1f1b"]
ep = [8]
ac = ["full"]
micro_batch = [1]
"""


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (from /proc, no psutil)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _gone(pid: int) -> bool:
    """No such process, or a zombie its (new) parent has not reaped yet."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) == "Z"
    except OSError:
        return True


def _wait_gone(pids: list[int], timeout_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


def _rows(table: Path) -> int:
    return table.read_text().count("\n") - 1 if table.exists() else 0


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signalled_2_worker_sweep_records_every_finished_point_and_leaves_nothing(tmp_path: Path,
                                                                                  signum: int) -> None:
    (tmp_path / "spec.toml").write_text(SPEC)
    out = tmp_path / "out"
    table = out / "results.csv"
    total = len(load_spec(tmp_path / "spec.toml").points())
    proc = subprocess.Popen([sys.executable, "-m", "moesim", "study", "capacity", "--spec", str(tmp_path / "spec.toml"),
                             "--out", str(out), "--workers", "2", "--no-report"], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _rows(table) < 3 and proc.poll() is None:
        time.sleep(0.02)
    workers = _children(proc.pid)
    os.kill(proc.pid, signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum, err
    last = err.strip().splitlines()[-1]
    rows = read_results(table)
    ids = [r["point_id"] for r in rows]
    assert 3 <= len(rows) < total, f"the signal did not land midway ({len(rows)} of {total})"
    assert len(ids) == len(set(ids))
    # every point the sweep finished is in the table: the count it reports is the table's
    assert f"{len(rows)} of {total} points recorded" in last and "run the same command again to resume" in last
    assert signal.Signals(signum).name in last and "Traceback" not in err
    assert len(workers) == 2 and not _wait_gone(workers), "pool workers outlived the sweep"
    assert sorted(p.name for p in out.iterdir()) == ["results.csv"]  # no .tmp, no lock left
    # the sweep resumes: every point exactly once
    again = subprocess.run([sys.executable, "-m", "moesim", "study", "capacity", "--spec", str(tmp_path / "spec.toml"),
                            "--out", str(out), "--workers", "2", "--no-report"], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 0, again.stderr
    final = [r["point_id"] for r in read_results(table)]
    assert len(final) == len(set(final)) == total and set(ids) <= set(final)


def _tiny_spec(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(SPEC.replace('gpus = ["b200", "b300", "gb200"]', 'gpus = ["b200"]')
                    .replace("gpu_counts = [64, 128, 256, 512]", "gpu_counts = [64]")
                    .replace("nic_gbps = [400, 800]", "nic_gbps = [400]"))
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_live_lock_refuses_a_second_sweep_and_a_stale_one_is_taken_over(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _tiny_spec(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (out / LOCK_NAME).write_text(f"{holder.pid}\n")
        message = assert_user_error(run_cli(["study", "capacity", "--spec", str(spec), "--out", str(out),
                                             "--workers", "1", "--no-report"], capsys), str(out), str(holder.pid))
        assert "in use" in message
        assert not (out / "results.csv").exists() and (out / LOCK_NAME).read_text() == f"{holder.pid}\n"
    finally:
        holder.kill()
        holder.wait()
    (out / LOCK_NAME).write_text(f"{_dead_pid()}\n")  # its sweep was killed: stale
    code, _, err = run_cli(["study", "capacity", "--spec", str(spec), "--out", str(out), "--workers", "1",
                            "--no-report"], capsys)
    assert code == 0, err
    assert len(read_results(out / "results.csv")) == 1 and not (out / LOCK_NAME).exists()


def test_the_lock_is_exclusive_within_one_folder(tmp_path: Path) -> None:
    with folder_lock(tmp_path):
        # the same process's PID in the lock reads as stale for a *new* process only; a live foreign PID:
        child = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            from studies.folder_lock import folder_lock
            from sim.errors import ConfigError
            try:
                with folder_lock({str(tmp_path)!r}):
                    print("took it")
            except ConfigError as err:
                print("refused:", err)
            """)], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60, check=False)
        assert child.stdout.startswith("refused:") and str(os.getpid()) in child.stdout, child.stdout + child.stderr
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_ray_sweep_without_ray_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match="ray"):
        run_sweep(load_spec(_tiny_spec(tmp_path)), tmp_path / "out", executor="ray")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("handler", ["default", "python"])
def test_sigterm_between_write_and_rename_leaves_no_temporary_file(tmp_path: Path, handler: str) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    script = textwrap.dedent(f"""
        import os, signal, sys
        from sim import fileio
        if {handler!r} == "python":
            def on_term(signum, frame):
                raise SystemExit(143)
            signal.signal(signal.SIGTERM, on_term)
        real_replace = os.replace
        def replace(src, dst):
            os.kill(os.getpid(), signal.SIGTERM)  # the signal lands between the write and the rename
            real_replace(src, dst)
        os.replace = replace
        fileio.write_atomic({str(target)!r}, "new")
        print("not reached")
        """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=ENV, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode in (-signal.SIGTERM, 143), result.stderr
    assert "not reached" not in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    assert target.read_text() in ("old", "new")


def test_ctrl_c_between_write_and_rename_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sim import fileio

    target = tmp_path / "out.json"
    target.write_text("old")

    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(fileio.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fileio.write_atomic(target, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"] and target.read_text() == "old"


def _trace(tmp_path: Path) -> Path:
    from tests.job_trace import DEEPEP_DISPATCH, job_events

    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": ' + __import__("json").dumps(
        job_events(("dispatch(F)", DEEPEP_DISPATCH, 100.0, 50.0, [20, 1, 1]))) + "}")
    return path


@pytest.mark.parametrize("argv", [
    ["calibrate", "fit", "{t}", "--out", "{t}", "--gpu", "h800"],
    ["calibrate", "fit", "{t}", "--out", "{link}", "--gpu", "h800"],
    ["calibrate", "compare", "{t}", "--sim-trace", "{t}", "--gpu", "h800"],
    ["calibrate", "compare", "{t}", "--sim-trace", "{hard}", "--gpu", "h800"],
])
def test_an_output_that_is_the_input_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                argv: list[str]) -> None:
    trace = _trace(tmp_path)
    (tmp_path / "link.json").symlink_to(trace)
    os.link(trace, tmp_path / "hard.json")
    before = trace.read_bytes()
    names = {"t": str(trace), "link": str(tmp_path / "link.json"), "hard": str(tmp_path / "hard.json")}
    message = assert_user_error(run_cli([a.format(**names) for a in argv], capsys), "overwrite the input")
    assert str(trace) in message
    assert trace.read_bytes() == before


def test_the_reference_leaves_a_partial_folder_it_did_not_create(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from reference.run import main

    partial = tmp_path / "X.partial"
    partial.mkdir()
    (partial / "notes.txt").write_text("someone's")
    assert main(["--model", "debug", "--tokens", "32", "--steps", "1", "--warmup", "0", "--device", "cpu",
                 "--profile", str(tmp_path / "X")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(partial) in err and "already exists" in err
    assert (partial / "notes.txt").read_text() == "someone's" and not (tmp_path / "X").exists()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_to_moesim_reference_stops_both_ranks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = subprocess.Popen([sys.executable, "-m", "moesim", "reference", "--ep", "2", "--model", "debug",
                             "--tokens", "32", "--steps", "100000", "--device", "cpu", "--profile",
                             str(tmp_path / "X")], cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    ranks: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        launchers = _children(proc.pid)
        ranks = [r for pid in launchers for r in _children(pid)]
        if len(ranks) == 2:
            break
        time.sleep(0.05)
    assert len(ranks) == 2, "the ranks did not start"
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert not _wait_gone([*launchers, *ranks]), "a rank outlived moesim reference"
    assert not (tmp_path / "X.partial").exists() and not (tmp_path / "X").exists()
