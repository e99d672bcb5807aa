"""Outputs are written whole or not at all: a full disk during ``--trace`` leaves no partial file."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from tests.robustness.cli import assert_user_error, run_cli

SMALL = ["predict", "--model", "debug", "--gpus", "8", "--ep", "4"]


def test_trace_written_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "t.json"
    code, _, err = run_cli([*SMALL, "--trace", str(target)], capsys)
    assert code == 0, err
    assert json.loads(target.read_text())["traceEvents"]
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary left behind


def test_full_disk_leaves_no_partial_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "t.json"
    target.write_text('{"old": true}')

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("sim.fileio.os.fsync", full)
    assert_user_error(run_cli([*SMALL, "--trace", str(target)], capsys), "No space left on device")
    assert target.read_text() == '{"old": true}'  # the old file, untouched
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_trace_into_read_only_place(capsys: pytest.CaptureFixture[str]) -> None:
    assert_user_error(run_cli([*SMALL, "--trace", "/proc/moesim-trace.json"], capsys), "moesim")


def test_symlink_is_written_through(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    code, _, err = run_cli([*SMALL, "--trace", str(link)], capsys)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert json.loads(real.read_text())["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_symlink_to_a_full_device_keeps_the_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    link = tmp_path / "full"
    link.symlink_to("/dev/full")
    assert_user_error(run_cli([*SMALL, "--trace", str(link)], capsys), "No space left on device", str(link))
    assert link.is_symlink() and os.readlink(link) == "/dev/full"
    assert Path("/dev/full").is_char_device()


def test_dash_and_fifo_are_streamed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import threading

    code, out, _ = run_cli([*SMALL, "--trace", "-"], capsys)
    assert code == 0 and '"traceEvents"' in out
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    code, _, err = run_cli([*SMALL, "--trace", str(fifo)], capsys)
    reader.join(timeout=30)
    assert code == 0, err
    assert json.loads(got[0])["traceEvents"]
    assert fifo.is_fifo()


def test_a_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_user_error(run_cli([*SMALL, "--trace", str(tmp_path)], capsys), str(tmp_path), "not a regular file")
    assert list(tmp_path.iterdir()) == []
