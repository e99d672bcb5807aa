"""The reference's arguments: bounded numbers, and ``--profile DIR`` (with or without a trailing slash)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from reference.run import main, partial_dir  # noqa: E402


def _one_error(capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize(("args", "needles"), [
    (["--timeout-s", "-1"], ("--timeout-s", "-1")),
    (["--timeout-s", "nan"], ("--timeout-s", "nan")),
    (["--timeout-s", "inf"], ("--timeout-s", "inf")),
    (["--seed", "-1"], ("--seed", "-1")),
    (["--tokens", str(1 << 40)], ("--tokens",)),
    (["--profile", "/proc/moesim-profile"], ("--profile", "/proc")),
])
def test_bad_arguments_exit_2(args: list[str], needles: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    _one_error(capsys, *needles)


def test_profile_under_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    assert main(["--profile", str(tmp_path / "f" / "out")]) == 2
    _one_error(capsys, "--profile", "not a directory")


def test_partial_dir_is_beside_the_target() -> None:
    assert partial_dir("out/") == Path("out.partial")
    assert partial_dir("a/b/out") == Path("a/b/out.partial")


@pytest.mark.parametrize("slash", ["/", ""])
def test_profile_trailing_slash_writes_there(tmp_path: Path, slash: str, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The README's ``--profile out/``: it used to crash after the run and leave ``out/`` empty."""
    monkeypatch.chdir(tmp_path)
    code = main(["--model", "debug", "--precision", "fp32", "--tokens", "32", "--steps", "1", "--warmup", "0",
                 "--device", "cpu", "--profile", "out" + slash])
    assert code == 0, capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["meta.json", "trace_rank0.json"]
    assert json.loads((tmp_path / "out" / "meta.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no out.partial left
