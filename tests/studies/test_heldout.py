"""Runs no fit reads (models never fitted: GPT-OSS-120B, Kimi-K2; other table rows of the fitted models), predicted
with the shipped calibration and reported in docs/transfer.md with their errors, intervals and same-plan ratios."""

from __future__ import annotations

import math
from pathlib import Path

from studies.dataset import load_runs
from studies.heldout import (
    HELDOUT_MODELS,
    HELDOUT_RUNS,
    HELDOUT_TORCHTITAN,
    SAME_PLAN_PAIRS,
    heldout_markdown,
    heldout_rows,
    heldout_runs_markdown,
    torchtitan_markdown,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_held_out_runs_are_not_in_the_fitted_dataset() -> None:
    held = load_runs(HELDOUT_MODELS)
    shipped = load_runs()
    assert {r.model for r in held} == {"gpt-oss-120b", "kimi-k2"}
    assert not {r.model for r in shipped} & {r.model for r in held}
    assert not {r.id for r in shipped} & {r.id for r in held}


def test_every_held_out_run_is_predicted_with_an_interval() -> None:
    rows = heldout_rows()
    assert len(rows) == 18
    for r in rows:
        assert r.predicted_tokens_per_s_per_gpu is not None and math.isfinite(r.predicted_tokens_per_s_per_gpu)
        assert r.interval is not None and r.interval[0] < r.predicted_tokens_per_s_per_gpu < r.interval[1]
        assert r.fits_in_memory, r.run_id  # every published run ran


def test_the_section_states_each_run_and_each_same_plan_pair() -> None:
    lines = heldout_markdown()
    text = "\n".join(lines)
    rows = heldout_rows()
    for model in ("gpt-oss-120b", "kimi-k2"):
        errors = [r.predicted_tokens_per_s_per_gpu / r.measured_tokens_per_s_per_gpu - 1  # type: ignore[operator]
                  for r in rows if r.model == model]
        assert f"| {model} | {len(errors)} | **{sum(abs(e) for e in errors) / len(errors) * 100:.1f}%** |" in text
    for r in rows:
        assert f"| {r.run_id} |" in text
    pairs = [line for line in lines if line.startswith("| megatron-bridge")]
    assert len(pairs) == 3 * len(SAME_PLAN_PAIRS)


def test_the_held_out_table_rows_are_other_runs_of_the_fitted_models() -> None:
    held = load_runs(HELDOUT_RUNS)
    shipped = load_runs()
    assert len(held) == 33
    assert {r.model for r in held} <= {r.model for r in shipped}
    assert not {r.id for r in shipped} & {r.id for r in held}
    signature = {(r.model, r.gpu, r.gpus, r.release) for r in shipped}
    assert not {(r.model, r.gpu, r.gpus, r.release) for r in held} & signature  # no row of the dataset twice


def test_the_table_rows_section_lists_every_run_with_its_summary() -> None:
    text = "\n".join(heldout_runs_markdown())
    rows = heldout_rows(HELDOUT_RUNS)
    assert all(r.predicted_tokens_per_s_per_gpu is not None for r in rows)
    for r in rows:
        assert f"| {r.run_id} |" in text
    for gpu in ("b200", "b300", "gb200", "gb300", "h100"):
        assert f"| {gpu} |" in text


def test_the_held_out_ablation_script_reproduces_the_shipped_rows() -> None:
    """benchmarks/heldout_ablation.py with nothing held predicts the held-out files as docs/transfer.md does."""
    import importlib.util

    from studies.heldout import summary

    spec = importlib.util.spec_from_file_location("heldout_ablation", ROOT / "benchmarks" / "heldout_ablation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.row({})
    models = summary(heldout_rows(), lambda r: r.model)
    assert out["gpt-oss-120b"]["mape"] == round(models["gpt-oss-120b"]["mean_abs"], 4)
    assert out["table rows"]["runs"] == 33


def test_torchtitans_short_steps_leave_no_room_for_megatrons_step_boundary() -> None:
    """TorchTitan's public one-node steps (about a second; DeepSeek-V3 16B, no fit reads them) come out within 30%
    with TorchTitan's own step boundary, and more than 40% slow with Megatron's fitted ``step.fixed_s`` added: the
    reason the joint value is Megatron's alone (``StackProfile.joint_step_boundary``)."""
    held = load_runs(HELDOUT_TORCHTITAN)
    assert {r.stack for r in held} == {"torchtitan"} and not {r.id for r in held} & {r.id for r in load_runs()}
    rows = heldout_rows(HELDOUT_TORCHTITAN)
    assert len(rows) == len(held) == 2
    for r in rows:
        assert r.error is not None and abs(r.error) < 0.30, (r.run_id, r.error)
    text = "\n".join(torchtitan_markdown())
    for line in (x for x in text.splitlines() if x.startswith("| titan-")):
        with_fixed = float(line.rstrip(" |").rsplit("|", 1)[1].strip().rstrip("%"))
        assert with_fixed < -40, line
