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
