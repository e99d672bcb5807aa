"""docs/transfer.md is today's transfer table (fitted numbers, the run each is fitted to, every other run's
error grouped by architecture, fabric, backend and stack); each fitted number names a run marked fitted."""

from __future__ import annotations

from sim.measured_runs import load_runs
from studies.transfer import DOC, fitted_numbers, transfer_markdown


def test_every_fitted_number_names_a_run_marked_fitted() -> None:
    fitted = {r.id for r in load_runs() if r.fitted}
    numbers = fitted_numbers(["torchtitan", "megatron-26.02", "megatron-26.04"])
    assert {n.run_id for n in numbers} == fitted
    assert all(0 < n.value <= 1.5 for n in numbers)


def test_the_transfer_doc_is_fresh() -> None:
    """Fails on drift: run `python -m studies.transfer --write` and review the diff."""
    assert DOC.read_text(encoding="utf-8") == transfer_markdown()


def test_one_efficiency_per_release_and_the_others_are_tests() -> None:
    numbers = fitted_numbers(["torchtitan", "megatron-26.02", "megatron-26.04"])
    assert sorted((n.profile, n.arch) for n in numbers) == [
        ("megatron-26.02", "sm100"), ("megatron-26.04", "sm100"), ("torchtitan", "sm100")]
    text = transfer_markdown()
    held = [line for line in text.splitlines() if "| held out |" in line]
    for gpu in ("b300", "gb300", "h100", "gb200"):
        assert any(f"| {gpu} |" in line for line in held), gpu


def test_cross_gpu_ratios_are_measured_over_the_b200_run() -> None:
    text = transfer_markdown()
    section = text.split("## Across GPUs", 1)[1]
    rows = {line.split(" | ")[0].strip("| "): line for line in section.splitlines() if line.startswith("| mcore-")
            or line.startswith("| titan-")}
    # 26.02, same plan: B300 measures 2983 / 2689 = 1.109x B200
    assert "| mcore-26.02-dsv3-256xb200 |" in rows["mcore-26.02-dsv3-256xb300"]
    assert "| 1.109x |" in rows["mcore-26.02-dsv3-256xb300"]
    assert "| titan-dsv3-b200-bf16-deepep |" in rows["titan-dsv3-h100-bf16-deepep"]
    assert not any(run.startswith("mcore-26.02-dsv3-256xb200") for run in rows)  # the reference is not a row
