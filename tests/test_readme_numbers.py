"""Every model figure quoted in README.md and docs/*.md is today's (benchmarks/readme_numbers.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("readme_numbers", ROOT / "benchmarks" / "readme_numbers.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["readme_numbers"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_every_quoted_figure_is_todays_within_its_rounding() -> None:
    """Fails on drift: run `python benchmarks/readme_numbers.py --write` and review the diff."""
    mod = _module()
    results = mod.check()
    names = {fig.name for fig, _q, _t in results}
    assert "DeepSeek 2048-H800 tok/s/GPU" in names and len(results) >= 25
    drifted = [(fig.file, fig.name, quoted, today) for fig, quoted, today in results if quoted != today]
    assert not drifted, f"figures drifted (run benchmarks/readme_numbers.py --write): {drifted}"


def test_a_drifted_figure_is_caught_and_rewritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _module()
    (tmp_path / "doc.md").write_text("The answer is **41 tok/s** today.\n")
    fig = mod.Figure("answer", "doc.md", r"answer is \*\*(\d+) tok/s", lambda: "42")
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    assert [(q, t) for _f, q, t in mod.check([fig])] == [("41", "42")]
    assert mod.write([fig]) == 1
    assert (tmp_path / "doc.md").read_text() == "The answer is **42 tok/s** today.\n"
    assert mod.write([fig]) == 0
