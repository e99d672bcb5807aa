"""`moesim predict` says what it predicted and what it rests on."""

from __future__ import annotations

import pytest

from moesim.predict_cmd import main


def test_the_resolved_plan_is_under_the_title_with_the_stacks_sharding(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "deepseek-v3-16b", "--gpu", "b200", "--gpus", "16", "--ep", "8", "--stack", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "plan: TP 1, PP 1 (1f1b), EP 8, ZeRO-1 over 16 data-parallel ranks, global batch 128 x 4096" in out
    assert main(["--model", "deepseek-v3-16b", "--gpu", "b200", "--gpus", "16", "--ep", "8"]) == 0
    assert "FSDP over 16 data-parallel ranks" in capsys.readouterr().out


def test_wide_shows_exposed_and_hidden_seconds_per_kind(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # wide enough that no header wraps (moesim.render fits the console)
    assert main(["--model", "deepseek-v3-16b", "--gpu", "b200", "--gpus", "16", "--ep", "8", "--stack", "megatron",
                 "--ep-overlap", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "a2a hidden s" in out and "comm.a2a exposed s" in out and "comm.a2a hidden s" in out


def test_unknown_gpu_says_unknown_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "debug", "--gpu", "b2000", "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert "unknown GPU 'b2000'" in err and err.count("\n") == 1


def test_placeholder_efficiency_and_foreign_calibration_are_said(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "deepseek-v3-16b", "--gpu", "b200", "--gpus", "16", "--ep", "8",
                 "--calibration", "h800-deepseek-trace"]) == 0
    assert "measured on h800; this prediction is for b200" in capsys.readouterr().out
    assert main(["--model", "deepseek-v3-16b", "--gpu", "h800", "--gpus", "16", "--ep", "8", "--stack", "deepseek"]) == 0
    assert "PLACEHOLDER" in capsys.readouterr().out
