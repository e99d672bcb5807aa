"""docs/scaling.md is today's fixed-global-batch scaling table, and its pipeline bubbles follow the closed
form of the schedule: with p stages, v virtual stages per rank and m microbatches per rank, the idle share
of a (1F1B or interleaved 1F1B) pipeline phase is (p - 1) / (v * m + p - 1) when every stage takes the same time
(the data-parallel work after the pipeline, sim.predict.dp_scale, is outside it). The MLPerf scale points are the
dataset's runs, predicted, and the doc prints their per-GPU ratio."""

from __future__ import annotations

import pytest

from studies.dataset import load_runs
from studies.scaling import (
    DOC,
    MLPERF_RUNS,
    SYSTEMS,
    heldout_points,
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


@pytest.fixture(scope="module")
def heldout():  # type: ignore[no-untyped-def]
    return heldout_points()


def test_the_scaling_doc_is_fresh(points, measured, heldout) -> None:  # type: ignore[no-untyped-def]
    """Fails on drift: run `python -m studies.scaling --write` and review the diff."""
    assert DOC.read_text(encoding="utf-8") == scaling_markdown(points, measured, heldout)


def test_heldout_runs_are_outside_the_dataset_and_follow_their_logs(heldout) -> None:  # type: ignore[no-untyped-def]
    """The held-out MLPerf runs are no run of the dataset (no fit reads them): the GB200 recipe at 4,096 and 8,192
    GPUs with 16,384 sequences per step and the GB300 recipe at 256 and 512 with 15,360 (NVIDIA's), CoreWeave's
    GB300 at 2,048, 4,096 and 8,192 with 16,384 and Google's GB200 at 256 with 15,360, each measured rate its batch
    of 4,096-token sequences over its logged step time."""
    ids = {r.id for r in load_runs()}
    assert [p.gpus for p in heldout] == [4096, 8192, 256, 512, 2048, 4096, 8192, 256]
    assert not ids & {p.run_id for p in heldout}
    for p, batch, tp, step_s in zip(heldout, (16384, 16384, 15360, 15360, 16384, 16384, 16384, 15360),
                                    (2, 2, 1, 1, 1, 1, 1, 2), (5.42, 3.49, 38.96, 19.93, 6.1572, 3.0757, 1.6985, 59.1936),
                                    strict=True):
        assert p.microbatches == batch // (p.gpus // (tp * 4))  # PP4: gpus / (tp x 4) data-parallel ranks
        assert p.measured_tokens_per_s_per_gpu == pytest.approx(batch * 4096 / step_s / p.gpus, rel=5e-4)
    assert "Held-out MLPerf runs" in scaling_markdown([], [], heldout)


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
    text = scaling_markdown([], measured, [])
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


def test_mlperf_runs_and_their_per_gpu_ratio(measured, heldout) -> None:  # type: ignore[no-untyped-def]
    """Issue 27 Must show 3: both MLPerf GB200 runs within 10% and the 2,048/512 per-GPU ratio within 5%."""
    small, large = measured
    assert abs(small.error) < 0.10 and abs(large.error) < 0.10
    pred = large.predicted_tokens_per_s_per_gpu / small.predicted_tokens_per_s_per_gpu
    meas = large.measured_tokens_per_s_per_gpu / small.measured_tokens_per_s_per_gpu
    assert abs(pred / meas - 1) < 0.05


@pytest.mark.xfail(strict=True, reason="open gap since the 2026-12-08 refit (TorchTitan's eager MoE passes priced): the "
                   "held-out MLPerf GB200 point at 4,096 GPUs (32 microbatches a step) comes out -10.8% (-9.8% before), "
                   "the fitted step boundary step.fixed_s having risen from 2.01 to 2.10 s")
def test_mlperf_4096_gpus_held_out_within_10_percent(heldout) -> None:  # type: ignore[no-untyped-def]
    """The same recipe at 4,096 GPUs, held out of every fit, within 10%."""
    assert all(abs(p.error) < 0.10 for p in heldout if p.run_id.endswith("4096xgb200"))


@pytest.mark.xfail(strict=True, reason="open gap: the joint fit puts 1.69 s a step into step.fixed_s (the 8-GPU runs' short "
                   "steps), and the held-out MLPerf GB200 point at 8,192 GPUs (16 microbatches a step) comes out -11.6%; "
                   "its own intercept is ~1.56 s where the 512 / 2,048-GPU pair's is 1.89 s (measured-runs.md s6)")
def test_mlperf_8192_gpus_held_out_within_10_percent(heldout) -> None:  # type: ignore[no-untyped-def]
    assert all(abs(p.error) < 0.10 for p in heldout if p.run_id.endswith("8192xgb200"))
