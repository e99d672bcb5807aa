"""docs/scaling.md is today's fixed-global-batch scaling table, and its pipeline bubbles follow the closed
form of the schedule: with p stages, v virtual stages per rank and m microbatches per rank, the idle share
of a (1F1B or interleaved 1F1B) pipeline phase is (p - 1) / (v * m + p - 1) when every stage takes the same time
(the data-parallel work after the pipeline, sim.predict.dp_scale, is outside it). The MLPerf scale points are the
dataset's runs, predicted, and the doc prints their per-GPU ratio."""

from __future__ import annotations

import pytest

from studies.scaling import (
    DOC,
    MLPERF_RUNS,
    SYSTEMS,
    mlperf_points,
    scaling_markdown,
    scaling_points,
)


@pytest.fixture(scope="module")
def points():  # type: ignore[no-untyped-def]
    return scaling_points()


@pytest.fixture(scope="module")
def measured():  # type: ignore[no-untyped-def]
    return mlperf_points()


def test_the_scaling_doc_is_fresh(points, measured) -> None:  # type: ignore[no-untyped-def]
    """Fails on drift: run `python -m studies.scaling --write` and review the diff."""
    assert DOC.read_text(encoding="utf-8") == scaling_markdown(points, measured)


def test_shares_count_the_scale_mechanisms(points) -> None:  # type: ignore[no-untyped-def]
    for p in points:
        assert 0 < p.dp_comm_share < 1 and 0 < p.straggler_share < 1, (p.system, p.gpus)
        assert p.bubble_share + p.dp_comm_share + p.straggler_share < 1


def test_mlperf_points_are_the_measured_runs(measured) -> None:  # type: ignore[no-untyped-def]
    assert [m.run_id for m in measured] == list(MLPERF_RUNS)
    small, large = measured
    assert (small.gpus, large.gpus) == (512, 2048)
    assert small.microbatches == 4 * large.microbatches  # same global batch, 4x the data-parallel ranks
    assert large.measured_tokens_per_s_per_gpu / small.measured_tokens_per_s_per_gpu == pytest.approx(0.844,
                                                                                                      abs=5e-4)
    assert large.bubble_s < small.bubble_s  # fewer microbatches, shorter step: a smaller bubble in seconds
    text = scaling_markdown([], measured)
    ratio = large.predicted_tokens_per_s_per_gpu / small.predicted_tokens_per_s_per_gpu
    assert "0.844 of the 512-GPU throughput measured" in text and f"{ratio:.3f} predicted" in text
    with pytest.raises(KeyError, match="no-such-run"):
        mlperf_points(("no-such-run",))


def test_bubbles_follow_the_schedule_closed_form(points) -> None:  # type: ignore[no-untyped-def]
    for p in points:
        fields = SYSTEMS[p.system][1]
        stages, virtual = int(str(fields["pp"])), int(str(fields.get("vpp", 1)))
        expected = (stages - 1) / (virtual * p.microbatches + stages - 1)
        assert p.pipeline_bubble_share == pytest.approx(expected, abs=0.03), (p.system, p.gpus)
        assert p.bubble_share < p.pipeline_bubble_share


def test_fewer_microbatches_never_raise_throughput_per_gpu(points) -> None:  # type: ignore[no-untyped-def]
    for system in SYSTEMS:
        tps = [p.tokens_per_s_per_gpu for p in points if p.system == system]
        assert all(b <= a * 1.001 for a, b in zip(tps, tps[1:])), (system, tps)
        assert tps[-1] < tps[0]
