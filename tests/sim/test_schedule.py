"""Pipeline schedules: closed forms for 1F1B, interleaved bubbles, DualPipe(V) runs to completion."""

import pytest

from sim.schedule import PipelineSpec, rank_orders, simulate_pipeline


@pytest.mark.parametrize("pp,m", [(2, 2), (4, 8), (3, 5)])
def test_1f1b_makespan_closed_form(pp, m):
    f, b = 1.0, 2.0
    res = simulate_pipeline(PipelineSpec("1f1b", pp, 1, m, [f] * pp, [b] * pp))
    assert res.makespan == pytest.approx((m + pp - 1) * (f + b))


def test_1f1b_with_p2p_adds_latency_on_the_critical_path():
    res = simulate_pipeline(PipelineSpec("1f1b", 2, 1, 4, [1.0, 1.0], [2.0, 2.0], p2p_s=0.1))
    # Every steady-state cycle crosses the rank boundary once: 4 microbatches -> 4 transfers exposed.
    assert res.makespan == pytest.approx((4 + 1) * 3.0 + 4 * 0.1)


def test_interleaving_shrinks_the_bubble():
    pp, m = 4, 16
    plain = simulate_pipeline(PipelineSpec("1f1b", pp, 1, m, [2.0] * pp, [4.0] * pp))
    inter = simulate_pipeline(PipelineSpec("interleaved-1f1b", pp, 2, m, [1.0] * 8, [2.0] * 8))
    busy = m * 6.0
    assert plain.makespan - busy == pytest.approx((pp - 1) * 6.0)
    assert inter.makespan - busy == pytest.approx((pp - 1) * 3.0)


def test_orders_cover_every_action_once():
    spec = PipelineSpec("interleaved-1f1b", 4, 2, 8, [1.0] * 8, [1.0] * 8)
    for p, order in enumerate(rank_orders(spec)):
        assert len(order) == len(set(order)) == 2 * 8 * 2
        assert {s for _, s, _ in order} == {p, p + 4}


@pytest.mark.parametrize("schedule", ["dualpipe", "dualpipev"])
def test_dualpipe_completes_and_overlap_helps(schedule):
    base = PipelineSpec(schedule, 4, 1, 16, [1.0] * 8, [2.0] * 8, p2p_s=0.01)
    plain = simulate_pipeline(base)
    pairs = {(i, j): 2.0 for i in range(8) for j in range(8)}
    fast = simulate_pipeline(PipelineSpec(schedule, 4, 1, 16, [1.0] * 8, [2.0] * 8, p2p_s=0.01, pair_s=pairs))
    assert fast.makespan < plain.makespan
    assert plain.makespan >= 16 * 2 * 3.0
