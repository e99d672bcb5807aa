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
