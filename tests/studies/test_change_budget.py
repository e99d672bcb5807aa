"""Where a change's seconds go (studies.change_budget): runs of one system that differ in one plan field, the
step seconds the change moves, measured against predicted, and the predicted move split by component."""

from __future__ import annotations

import statistics

import pytest

from studies.change_budget import (
    ChangeBudget,
    budget_markdown,
    budget_summary_markdown,
    change_budgets,
    main,
    one_change_pairs,
)
from studies.dataset import load_runs


@pytest.fixture(scope="module")
def budgets() -> dict[tuple[str, str], ChangeBudget]:
    return {(b.before, b.after): b for b in change_budgets()}


def test_only_runs_that_differ_in_one_plan_field_are_paired() -> None:
    pairs = {(a.id, b.id): field for a, b, field in one_change_pairs(load_runs())}
    assert pairs[("titan-dsv3-b200-bf16", "titan-dsv3-b200-bf16-deepep")] == "ep_backend"
    assert pairs[("titan-dsv3-b200-bf16-deepep", "titan-dsv3-b200-mxfp8-deepep")] == "precision"
    # backend and precision both change: not one change
    assert ("titan-dsv3-b200-bf16", "titan-dsv3-b200-mxfp8-deepep") not in pairs
    # same plan on two chips is a different system, not a plan change
    assert not any("sameplan" in a for a, _ in pairs)


def test_measured_steps_come_from_each_runs_tokens_per_second(budgets: dict[tuple[str, str], ChangeBudget]) -> None:
    b = budgets[("titan-dsv3-b200-bf16", "titan-dsv3-b200-bf16-deepep")]
    per_gpu_tokens = 4096 * 8192 / 256  # global batch x sequence over 256 GPUs
    assert b.measured_step_s == pytest.approx((per_gpu_tokens / 651, per_gpu_tokens / 859))
    assert b.measured_delta_s == pytest.approx(per_gpu_tokens / 859 - per_gpu_tokens / 651)
    # 64 microbatches x 58 MoE layers over 2 pipeline ranks
    assert b.moe_passes == 64 * 58 // 2


def test_the_components_account_for_the_whole_predicted_move(budgets: dict[tuple[str, str], ChangeBudget]) -> None:
    for b in budgets.values():
        assert sum(v for _, v in b.parts) == pytest.approx(b.predicted_delta_s, abs=1e-6)
        assert [abs(v) for _, v in b.parts] == sorted((abs(v) for _, v in b.parts), reverse=True)
    deepep = dict(budgets[("titan-dsv3-b200-bf16", "titan-dsv3-b200-bf16-deepep")].parts)
    assert deepep["comm.a2a"] < 0  # DeepEP saves all-to-all time
    mxfp8 = dict(budgets[("titan-dsv3-b200-bf16-deepep", "titan-dsv3-b200-mxfp8-deepep")].parts)
    assert mxfp8["compute.moe.expert_gemm"] < 0 < mxfp8["compute.moe.quantize"]  # faster GEMMs, new casts
    assert "comm.a2a" not in mxfp8  # the precision of the experts moves no all-to-all


def test_the_section_names_every_pair_and_the_cli_reads_other_files(capsys: pytest.CaptureFixture[str]) -> None:
    text = "\n".join(budget_markdown())
    assert "| titan-dsv3-h100-bf16 | titan-dsv3-h100-bf16-deepep | ep_backend: nccl -> deepep |" in text
    assert main(["studies/data/heldout_runs.toml"]) == 0
    assert "no two runs of one system differ" in capsys.readouterr().out
    assert main(["studies/data/heldout_models.toml"]) == 0  # Megatron-Bridge PR #3561's A/B: two precision pairs
    assert "| precision: bf16 -> mxfp8 | 2 |" in capsys.readouterr().out
    assert main(["studies/data/heldout_torchtitan.toml"]) == 0  # TorchTitan PR #1993's one-machine ladder
    assert "| titan-dsv3-16b-8xb200-pr1993-compiled | titan-dsv3-16b-8xb200-pr1993-ep1 | ep: 8 -> 1 |" in \
        capsys.readouterr().out
    assert main(["no/such/file.toml"]) == 2
    assert "no/such/file.toml" in capsys.readouterr().out


def test_the_summary_counts_directions_with_a_dead_band() -> None:
    """A predicted move under STILL of the step is no move: it never agrees with a measured one."""
    from studies.change_budget import STILL, _direction
    from studies.heldout import EFA_RUNS

    assert _direction(STILL / 2) == 0 and _direction(2 * STILL) == 1 and _direction(-2 * STILL) == -1
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in budget_summary_markdown(EFA_RUNS)
            if line.startswith("| ep_backend") or line.startswith("| micro_batch")}
    # UCCL-EP and DeepEP cost the same in the model over EFA (0.0%), while the measured steps differ: no agreement
    # and no move ratio, since the model moves nothing to compare the measured seconds with
    assert rows["ep_backend: uccl-ep -> deepep"][-2].startswith("0 of")
    assert rows["ep_backend: uccl-ep -> deepep"][-1] == "- |"
    # a smaller micro-batch is slower in every measured pair and every prediction
    pairs = rows["micro_batch: 4 -> 1"]
    assert pairs[-2] == f"{pairs[1]} of {pairs[1]}"
    assert float(pairs[-1].rstrip(" |x")) > 0  # both move the step the same way


def test_the_move_ratio_is_measured_over_predicted(budgets: dict[tuple[str, str], ChangeBudget]) -> None:
    """The factor the moving components would need: 1 for a right move; None where nothing is predicted to move."""
    for b in budgets.values():
        assert b.move_ratio == pytest.approx(b.measured_delta_s / b.predicted_delta_s)
    mxfp8 = budgets[("titan-dsv3-b200-bf16-deepep", "titan-dsv3-b200-mxfp8-deepep")]
    assert f"| {mxfp8.move_ratio:.2f}x |" in "\n".join(budget_markdown())
    still = ChangeBudget("a", "b", "micro_batch", "1 -> 2", (10.0, 9.0), (10.0, 10.0), (), 0)
    assert still.move_ratio is None


def test_the_move_at_kernel_rates_sets_the_release_scalar_alone_to_one(
        budgets: dict[tuple[str, str], ChangeBudget]) -> None:
    """The kernel-rate column predicts both runs with the release's joint scalar at 1: a run the scalar slows is
    faster there, and a release the joint calibration does not cover gets no column."""
    from studies.change_budget import kernel_rate_params

    b = budgets[("titan-dsv3-b200-bf16-deepep", "titan-dsv3-b200-mxfp8-deepep")]
    assert b.kernel_rate_step_s is not None
    # TorchTitan's fitted scalar is below 1, so both steps are shorter at kernel rates
    assert all(k < p for k, p in zip(b.kernel_rate_step_s, b.predicted_step_s))
    assert b.kernel_rate_delta_s == pytest.approx(b.kernel_rate_step_s[1] - b.kernel_rate_step_s[0])
    assert b.kernel_rate_ratio == pytest.approx(b.measured_delta_s / b.kernel_rate_delta_s)
    # MXFP8's move shrinks with the scalar's slowdown of the GEMMs it speeds up
    assert abs(b.kernel_rate_delta_s) < abs(b.predicted_delta_s)
    assert kernel_rate_params("torchtitan") == {"release.torchtitan": 1.0}
    assert kernel_rate_params("no-such-release") is None
    row = next(line for line in budget_markdown() if "| titan-dsv3-b200-bf16-deepep | titan-dsv3-b200-mxfp8" in line)
    assert f"| {b.kernel_rate_delta_s:+.2f} | {b.kernel_rate_ratio:.2f}x |" in row


def test_the_held_out_summary_reads_every_held_out_file_but_the_efa_matrix(capsys: pytest.CaptureFixture[str]) -> None:
    from studies.change_budget import held_out_budgets

    budgets = held_out_budgets()
    befores = {b.before for b in budgets}
    assert "mcore-25.11-dsv3-256xgb300-bf16" in befores  # heldout_early.toml
    assert "mcore-pr3561-gpt-oss-120b-64xgb200-bf16-nccl" in befores  # heldout_models.toml
    assert "titan-dsv3-16b-8xb200-pr1993" in befores  # heldout_torchtitan.toml
    assert not any(b.before.startswith("aws-") for b in budgets)  # the EFA matrix has its own summary
    mxfp8 = [b for b in budgets if b.change == "bf16 -> mxfp8"]
    ratios = sorted(b.move_ratio for b in mxfp8 if b.move_ratio is not None)
    assert len(ratios) >= 3
    assert main(["--held-out"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| precision: bf16 -> mxfp8 |"))
    assert row.rstrip(" |").endswith(f"{statistics.median(ratios):.2f}x")  # the median of the pairs' move ratios
    assert main(["--held-out", "studies/data/efa_runs.toml"]) == 2
    assert "--held-out" in capsys.readouterr().out
