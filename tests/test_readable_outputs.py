"""Readable outputs: the README's ``predict --wide`` commands and ``compare`` print every cell whole at any
console width (``$COLUMNS`` 100 and 240: each variant name and each number of the command's ``--json``,
formatted as the table formats it, appears whole in the text, and no table line is wider than the console);
a failed write names the user's path, not the temporary file; ``moesim reference`` keeps TorchAO's warnings
out of its stderr."""

from __future__ import annotations

import errno
import io
import json
import os
import re
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from moesim.cli import main
from moesim.render import NON_TTY_WIDTH, column_groups, console_width, render_table
from sim.fileio import write_atomic

GIB = 2 ** 30
README_PREDICTS = [
    [],
    ["--model", "deepseek-v3-16b", "--gpu", "h100", "--gpus", "64", "--ep", "8", "--ep-backend", "deepep"],
    ["--model", "deepseek-v3-671b", "--gpu", "gb200", "--gpus", "256", "--pp", "4", "--vpp", "4", "--ep", "64",
     "--seq-len", "4096", "--global-batch", "4096", "--ac", "selective", "--precision", "mxfp8",
     "--ep-backend", "hybridep", "--stack", "megatron"],
]


def run_cli(argv: list[str]) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(argv)
    assert code == 0, (argv, out.getvalue())
    return out.getvalue()


def table_lines(text: str, n_rows: int) -> list[str]:
    """The lines of the tables: each header rule (a line of ``─``), the header above it and the ``n_rows`` rows
    below it (one line each: a cell never wraps where the table has room for it)."""
    lines = text.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if line and set(line) == {"─"}:
            out += lines[i - 1:i + 1 + n_rows]
    return out


def assert_whole(text: str, cells: list[str], width: int, n_rows: int) -> None:
    lines = table_lines(text, n_rows)
    assert lines, text
    rows = "\n".join(lines)
    for cell in cells:
        assert re.search(r"(?<![\w.])" + re.escape(cell) + r"(?![\w.])", rows), \
            f"{cell!r} is not printed whole at width {width}:\n{text}"
    assert max(len(line) for line in lines) <= width, text


def predict_cells(pred: dict[str, Any]) -> list[str]:
    """What the predict table prints for ``pred`` (one variant of ``--json``)."""
    cells = [pred["name"], f"{pred['tokens_per_s_per_gpu']:.1f}", f"{pred['step_time_s']:.1f}",
             f"{pred['tflops_per_gpu']:.1f}", f"{pred['mfu'] * 100:.1f}%",
             f"{pred['peak_memory_bytes'] / GIB:.1f} / {pred['memory_capacity_bytes'] / GIB:.0f}"]
    if pred.get("measured_tokens_per_s_per_gpu"):
        cells.append(f"{pred['measured_tokens_per_s_per_gpu']:g}")
    for kind, seconds in pred["breakdown"].items():
        if kind.startswith("comm.") or kind == "host_sync":
            cells.append(f"{seconds:.2f}")
    for entry in pred["comm"].values():  # the rate of the bytes that cross the kind's link
        cells.append(f"{entry['link_gbps']:.1f}")
    return cells


@pytest.mark.parametrize("argv", README_PREDICTS, ids=["seed", "dsv3-16b-h100", "dsv3-671b-gb200"])
def test_predict_wide_prints_every_cell_whole(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    data = json.loads(run_cli(["predict", *argv, "--json"]))
    cells = [c for p in data["predictions"] for c in predict_cells(p)]
    assert len(data["predictions"]) >= 1 and len(cells) >= 8
    for width in (100, 240):
        monkeypatch.setenv("COLUMNS", str(width))
        assert_whole(run_cli(["predict", *argv, "--wide"]), cells, width, len(data["predictions"]))


def test_compare_prints_every_cell_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["compare", "examples/b200-vs-gb200-qwen3.toml"]
    data = json.loads(run_cli([*argv, "--json"]))
    cells = [c for v in data["variants"] for c in (v["name"], f"{v['tokens_per_s_per_gpu']:.1f}",
                                                   f"{v['step_time_s']:.2f}", f"{v['mfu'] * 100:.1f}%")]
    cells += [f"{r['ratio']:.3f}x" for r in data["ratios"]]
    monkeypatch.setenv("COLUMNS", "100")
    assert_whole(run_cli(argv), cells, 100, len(data["variants"]))


def test_render_table_splits_instead_of_cutting() -> None:
    headers = ["variant", *(f"column number {i} s" for i in range(12))]
    rows = [[f"variant {v} with a long name", *(f"{v * 1000 + i + 0.123456:.4f}" for i in range(12))] for v in range(3)]
    for width in (60, 80, 100, 240):
        text = render_table(headers, rows, title="t", notes=["a note longer than any console " * 12], width=width)
        assert_whole(text, [c for r in rows for c in r], width, len(rows))
        assert all(word in text for h in headers for word in h.split())  # headers may wrap, at their spaces
        groups = column_groups([len(h) for h in headers], width)
        assert sorted({c for g in groups for c in g}) == list(range(len(headers))) and all(g[0] == 0 for g in groups)
    assert ("a note longer than any console " * 12).rstrip() in text  # notes are never wrapped or cut either
    narrow = render_table(headers, rows, width=40)  # the key column and one more do not fit: names wrap at spaces
    assert all(re.search(r"(?<![\w.])" + re.escape(c) + r"(?![\w.])", narrow) for r in rows for c in r[1:]), narrow
    assert max(len(line) for line in narrow.splitlines()) <= 40, narrow


def test_console_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "123")
    assert console_width() == 123
    monkeypatch.setenv("COLUMNS", "not a number")
    monkeypatch.setattr("sys.stdout", io.StringIO())  # not a terminal
    assert console_width() == NON_TTY_WIDTH


def test_write_atomic_errors_name_the_users_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed write names the destination the user gave, never the temporary file beside it."""
    missing = tmp_path / "no" / "such" / "report.json"
    with pytest.raises(FileNotFoundError) as err:
        write_atomic(missing, "{}")
    assert err.value.filename == str(missing) and ".tmp" not in str(err.value), err.value
    target = tmp_path / "out.json"

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def cross(src: str, dst: str) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link", src, dst)

    for name, fake in (("fsync", full), ("replace", cross)):
        with monkeypatch.context() as m:
            m.setattr(f"sim.fileio.os.{name}", fake)
            with pytest.raises(OSError) as err:
                write_atomic(target, "{}")
        assert err.value.filename == str(target) and ".tmp" not in str(err.value), err.value
        assert err.value.errno in (errno.ENOSPC, errno.EXDEV)
    assert not target.exists() and not list(tmp_path.glob(".*tmp"))  # nothing half written, nothing left


def test_cli_error_names_the_users_trace_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "missing-folder" / "step.json"
    assert main(["predict", "--model", "deepseek-v3-16b", "--gpu", "h100", "--gpus", "64", "--ep", "8",
                 "--trace", str(trace)]) == 2
    err = capsys.readouterr().err
    assert str(trace) in err and ".tmp" not in err and len(err.strip().splitlines()) == 1, err


def test_reference_stderr_has_no_torchao_warnings() -> None:
    """``moesim reference`` (MXFP8 through TorchAO, emulated on the CPU) prints no TorchAO warning, no
    ``UserWarning`` and none of torch's ``_pytree`` notices for TorchAO's enums; its result line still prints."""
    pytest.importorskip("torchao")
    env = {**os.environ, "TORCHAO_FORCE_SKIP_LOADING_SO_FILES": "1"}
    env.pop("PYTHONWARNINGS", None)
    done = subprocess.run([sys.executable, "-m", "moesim", "reference", "--model", "debug", "--ep", "1",
                           "--dispatch", "local", "--precision", "mxfp8", "--tokens", "64", "--steps", "1",
                           "--warmup", "0", "--device", "cpu"], check=False, capture_output=True, text=True, timeout=120,
                          env=env, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert "precision=mxfp8" in done.stdout and "tokens/s" in done.stdout, done.stdout
    noisy = [line for line in done.stderr.splitlines()
             if re.search(r"torchao|UserWarning|Warning:|_pytree|register_constant", line, re.IGNORECASE)]
    assert not noisy, done.stderr


def test_quiet_torchao_filters_only_torchao(caplog: pytest.LogCaptureFixture) -> None:
    """In process (no torch): TorchAO's logger warnings, warnings raised from its modules and the ``_pytree``
    enum notices are dropped; another module's warning and another ``_pytree`` record still come through."""
    import logging
    import warnings

    from reference.quiet import quiet_torchao

    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        quiet_torchao()
        quiet_torchao()  # idempotent
        warnings.warn_explicit("deprecated thing", DeprecationWarning, "x.py", 1, module="torchao.prototype.mx")
        warnings.warn("torchao: the MXFP8 kernels are emulated", UserWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["something else"]
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("torchao").warning("Skipping import of cpp extensions")
        logging.getLogger("torch.utils._pytree").warning(
            "<enum 'KernelPreference'> is an Enum subclass ... Calling register_constant() on Enum subclasses is "
            "deprecated and will be an error in a future release.")
        logging.getLogger("torch.utils._pytree").warning("another notice")
        logging.getLogger("torchao").error("a real torchao error")
    assert [r.getMessage() for r in caplog.records] == ["another notice", "a real torchao error"]
    assert len(logging.getLogger("torch.utils._pytree").filters) == 1
