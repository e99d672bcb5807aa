"""docs/scaling.md is today's fixed-global-batch scaling table, and its pipeline bubbles follow the closed
form of the schedule: with p stages, v virtual stages per rank and m microbatches per rank, the idle share
of a (1F1B or interleaved 1F1B) step is (p - 1) / (v * m + p - 1) when every stage takes the same time."""

from __future__ import annotations

import pytest

from studies.scaling import DOC, SYSTEMS, scaling_markdown, scaling_points


@pytest.fixture(scope="module")
def points():  # type: ignore[no-untyped-def]
    return scaling_points()


def test_the_scaling_doc_is_fresh(points) -> None:  # type: ignore[no-untyped-def]
    """Fails on drift: run `python -m studies.scaling --write` and review the diff."""
    assert DOC.read_text(encoding="utf-8") == scaling_markdown(points)


def test_bubbles_follow_the_schedule_closed_form(points) -> None:  # type: ignore[no-untyped-def]
    for p in points:
        fields = SYSTEMS[p.system][1]
        stages, virtual = int(str(fields["pp"])), int(str(fields.get("vpp", 1)))
        expected = (stages - 1) / (virtual * p.microbatches + stages - 1)
        assert p.bubble_share == pytest.approx(expected, abs=0.03), (p.system, p.gpus)


def test_fewer_microbatches_never_raise_throughput_per_gpu(points) -> None:  # type: ignore[no-untyped-def]
    for system in SYSTEMS:
        tps = [p.tokens_per_s_per_gpu for p in points if p.system == system]
        assert all(b <= a * 1.001 for a, b in zip(tps, tps[1:])), (system, tps)
        assert tps[-1] < tps[0]
