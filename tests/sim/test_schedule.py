"""Pipeline schedules: closed forms for 1F1B, interleaved bubbles, DualPipe(V)'s fixed step orders."""

import dataclasses
from itertools import pairwise

import pytest

from sim.catalog import load_cluster, load_model
from sim.errors import PlanError
from sim.predict import validate_plan
from sim.schedule import PipelineSpec, dualpipev_steps, rank_orders, simulate_pipeline
from sim.specs import ParallelPlan


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


# --- DualPipe / DualPipeV: the fixed step orders of deepseek-ai/DualPipe ---------------------------------


def _dual(schedule, pp, m, f=1.0, b=2.0, w=1.0, pair=None, p2p=0.0):
    n = 2 * pp
    pairs = {(i, j): pair for i in range(n) for j in range(n)} if pair is not None else {}
    return simulate_pipeline(PipelineSpec(schedule, pp, 1, m, [f] * n, [b] * n, p2p_s=p2p, pair_s=pairs,
                                          w_s=[w] * n))


def _dualpipev_closed_form(pp, m, f, b, w, pair):
    """Makespan of DualPipeV with uniform chunks, B = 2F, W = F (= B/2), no transfer time, F&B pair time
    ``pair`` in [B, F + B].

    Rank 0 never idles in steps 1-3 (its 2*pp - 1 chunk-0 forwards end exactly when microbatch 0 returns up
    the V), so with no overlap (pair = F + B) its idle time is the drain: (pp - 1) F waiting after its last
    main-loop pair, then F before each of the pp - 1 step-5 pairs: 2 (pp - 1) F, which is DeepSeek-V3's
    (PP - 1)(F&B + B - 3W) at F&B = F + B, B = 2F, W = F (table 2, per DualPipeV chunk). Every rank does
    2m (F + B) of work. Overlap shortens each pair on the critical path by F + B - pair; that path crosses
    rank 0's 2m - 3pp + 1 pairs and, in the drain, pp - 3 more on the ranks below it: 2m - pp - 2 pairs.
    """
    assert b == 2 * f and w == f and b <= pair <= f + b
    return 2 * m * (f + b) + (pp - 1) * (f + 2 * b - 3 * w) - (2 * m - pp - 2) * (f + b - pair)


def test_dualpipev_step_order_follows_the_reference():
    # Rank 1 of 4, 8 microbatches: warm = 2, late = 2, main loop n - 2pp + late = 2 iterations.
    assert dualpipev_steps(4, 8, 1) == (
        [("F", 0)] * 4 + [("F", 0), ("F", 1)] * 2 + [("I", 1), ("W", -1), ("F", 1)] * 2
        + [("FB", 0), ("FB", 1)] * 2 + [("B", 1), ("FB", 1)] * 2
        + [("B", 1), ("B", 0), ("I", 1), ("I", 0)]  # odd rank: W deferred from the middle B1 on
        + [("W", -1), ("I", 0)] * 2 + [("W", -1)] * 2
    )
    # The tip rank runs its first main-loop F0 and B1 apart; an even rank defers from the middle B0 on.
    tip = dualpipev_steps(4, 8, 3)
    assert tip[8:11] == [("F", 0), ("B", 1), ("FB", 1)]
    assert tip[-12:-4] == [("B", 1), ("B", 0), ("B", 1), ("B", 0), ("I", 1), ("I", 0), ("I", 1), ("I", 0)]
    assert dualpipev_steps(4, 8, 2)[-11:] == [("B", 1), ("B", 0), ("B", 1), ("I", 0), ("I", 1), ("I", 0),
                                              ("W", -1), ("I", 0), ("W", -1), ("W", -1), ("W", -1)]
    for r in range(4):
        steps = dualpipev_steps(4, 8, r)
        f = sum(k == "F" for k, _ in steps) + sum(k == "FB" for k, _ in steps)
        b = sum(k in ("B", "I") for k, _ in steps) + sum(k == "FB" for k, _ in steps)
        assert f == b == 2 * 8
        assert sum(k == "I" for k, _ in steps) == sum(k == "W" for k, _ in steps) == 2 * 4 - r - 1


@pytest.mark.parametrize("m", [8, 10])
@pytest.mark.parametrize("pair", [3.0, 2.5, 2.0])
def test_dualpipev_makespan_closed_form(m, pair):
    pp, f, b, w = 4, 1.0, 2.0, 1.0
    res = _dual("dualpipev", pp, m, f, b, w, pair)
    assert res.makespan == _dualpipev_closed_form(pp, m, f, b, w, pair)
    # By hand for pp = 4, m = 8, no overlap: 2 * 8 * 3 of work + (4 - 1)(1 + 4 - 3) of bubble = 54.
    if m == 8 and pair == 3.0:
        assert res.makespan == 54.0
        assert [res.makespan - res.busy(p) for p in range(pp)] == [6.0] * 4


@pytest.mark.parametrize("pp", [2, 3, 5, 8])
def test_dualpipev_closed_form_other_depths(pp):
    for m in (2 * pp, 2 * pp + 3):
        for pair in (3.0, 2.25):
            assert _dual("dualpipev", pp, m, pair=pair).makespan == _dualpipev_closed_form(pp, m, 1.0, 2.0, 1.0, pair)


@pytest.mark.parametrize("pp", [4, 6, 8])
def test_dualpipev_bubble_beats_1f1b_and_overlap_shortens_the_step(pp):
    m, f, b, w = 2 * pp + 4, 1.0, 2.0, 1.0
    # 1F1B over the same model: each rank's stage is the two DualPipeV chunks it would hold.
    plain = simulate_pipeline(PipelineSpec("1f1b", pp, 1, m, [2 * f] * pp, [2 * b] * pp))
    work = 2 * m * (f + b)
    assert plain.makespan - work == (pp - 1) * 2 * (f + b)
    dual = _dual("dualpipev", pp, m, f, b, w)
    assert all(dual.busy(p) == work for p in range(pp))
    assert dual.makespan - work < plain.makespan - work
    unsplit = _dual("dualpipev", pp, m, f, b, 0.0)  # no zero-bubble W deferral: larger bubble, still < 1F1B
    assert dual.makespan < unsplit.makespan < plain.makespan
    overlapped = _dual("dualpipev", pp, m, f, b, w, pair=2.5)
    assert overlapped.makespan < dual.makespan


def _check_timeline(res, n_stages, m, schedule, pp):
    tl = res.timeline
    keys = {(ph, s, mb) for ph in "FB" for s in range(n_stages) for mb in range(m)}
    assert {k for k in tl if k[0] != "W"} == keys
    # Once each: the ranks' actions (a pair counts as one F and one B) add up to every F and B exactly once.
    phases = [a[0] for acts in res.actions for a in acts]
    assert phases.count("F") + phases.count("FB") == phases.count("B") + phases.count("FB") == m * n_stages
    for acts in res.actions:  # a rank runs one thing at a time
        assert all(a[4] <= nxt[3] for a, nxt in pairwise(acts))
    for (ph, s, mb), (rank, start, end) in tl.items():
        assert end >= start
        if ph == "F" and s > 0:
            assert start >= tl[("F", s - 1, mb)][2]
        if ph == "B":
            assert start >= tl[("B", s + 1, mb) if s < n_stages - 1 else ("F", s, mb)][2]
        if ph == "W":
            assert start >= tl[("B", s, mb)][2] and tl[("B", s, mb)][0] == rank
        # DualPipeV: stage s on rank s or 2pp-1-s; DualPipe: chunks 2k, 2k+1 on rank k one way, pp-1-k the other.
        if schedule == "dualpipev":
            assert rank == (s if s < pp else 2 * pp - 1 - s)
        else:
            assert rank == (s // 2 if mb < m // 2 else pp - 1 - s // 2)


@pytest.mark.parametrize("schedule,pp,m", [("dualpipev", 4, 8), ("dualpipev", 5, 13), ("dualpipe", 4, 8),
                                           ("dualpipe", 6, 16)])
@pytest.mark.parametrize("p2p", [0.0, 0.1])
def test_dual_actions_once_and_dependencies_hold(schedule, pp, m, p2p):
    res = _dual(schedule, pp, m, 1.0, 2.0, 0.5, pair=2.5, p2p=p2p)
    _check_timeline(res, 2 * pp, m, schedule, pp)
    # Deferred weight gradients: 2 * pp' - r - 1 per rank r of the DualPipeV order (pp' = pp, or pp / 2 for
    # DualPipe, whose steps cover two chunks each).
    if schedule == "dualpipev":
        deferred = sum(2 * pp - r - 1 for r in range(pp))
    else:
        deferred = 2 * sum(pp - min(r, pp - 1 - r) - 1 for r in range(pp))
    assert sum(1 for k in res.timeline if k[0] == "W") == deferred


def test_dualpipe_times_like_dualpipev_on_half_the_ranks():
    """DualPipe on pp ranks runs, on each mirror pair of ranks, the DualPipeV order of pp/2 ranks over half the
    microbatches and pp stages (two chunks each): with equal costs and no transfer time the makespans match.
    It is not DualPipeV on pp ranks: that one's bubble is one chunk-pair longer."""
    for pp, m in [(4, 8), (6, 12), (8, 20)]:
        dual = _dual("dualpipe", pp, m, pair=2.5)
        half = simulate_pipeline(PipelineSpec("dualpipev", pp // 2, 1, m // 2, [2.0] * pp, [4.0] * pp,
                                              pair_s={(i, j): 5.0 for i in range(pp) for j in range(pp)},
                                              w_s=[2.0] * pp))
        assert dual.makespan == half.makespan
        assert dual.makespan < _dual("dualpipev", pp, m, pair=2.5).makespan


def test_dual_requirements_are_plan_errors():
    with pytest.raises(PlanError, match=r"at least 8 microbatches, got 7"):
        _dual("dualpipev", 4, 7)
    with pytest.raises(PlanError, match=r"even pp"):
        _dual("dualpipe", 3, 12)
    with pytest.raises(PlanError, match=r"even count, got 9"):
        _dual("dualpipe", 4, 9)
    model = load_model("debug")
    cluster = load_cluster("hgx-b200", n_gpus=8)
    with pytest.raises(PlanError, match=r"pp_schedule 'dualpipev' with pp \(2\) needs at least 4 microbatches"):
        validate_plan(model, cluster, ParallelPlan(pp=2, pp_schedule="dualpipev", ep=4, dp_shard=4,
                                                   global_batch=12, seq_len=512))
    with pytest.raises(PlanError, match=r"'dualpipe' needs an even pp"):
        validate_plan(model, load_cluster("hgx-b200", n_gpus=24),
                      ParallelPlan(pp=3, pp_schedule="dualpipe", ep=4, dp_shard=8, global_batch=48, seq_len=512))
    with pytest.raises(PlanError, match=r"'dualpipe' feeds half the microbatches from each end.*got 9"):
        validate_plan(model, load_cluster("hgx-b200", n_gpus=16),
                      ParallelPlan(pp=2, pp_schedule="dualpipe", ep=4, dp_shard=8, global_batch=72, seq_len=512))


def test_combined_1f1b_pairs_steady_state_and_keeps_dependencies():
    """Megatron's combined 1F1B: every key runs exactly once, pairs hold one F and one B, and with pair time
    equal to F + B nothing beats plain 1F1B's dependency order by more than the one extra warm-up."""
    from sim.schedule import combined_orders

    for sched, pp, v, m in [("1f1b", 2, 1, 4), ("1f1b", 4, 1, 8), ("interleaved-1f1b", 2, 2, 4),
                            ("interleaved-1f1b", 4, 2, 8)]:
        n = pp * v
        spec = PipelineSpec(sched, pp, v, m, [1.0] * n, [2.0] * n, combined=True)
        orders = combined_orders(spec)
        keys = [k for o in orders for a in o for k in a]
        assert len(keys) == len(set(keys)) == 2 * m * n
        assert all(a[0][0] == "F" and a[1][0] == "B" for o in orders for a in o if len(a) == 2)
        res = simulate_pipeline(spec)
        assert len(res.timeline) == 2 * m * n
        fast = simulate_pipeline(dataclasses.replace(spec, pair_s={(i, j): 1.0 for i in range(n) for j in range(n)}))
        assert fast.makespan < res.makespan


def test_combined_single_rank_closed_form():
    """pp = 1: F0, (F(i+1) with B(i)) x (m-1), B(m-1): F + (m-1) * pair + B."""
    spec = PipelineSpec("1f1b", 1, 1, 4, [1.0], [2.0], pair_s={(0, 0): 2.5}, combined=True)
    res = simulate_pipeline(spec)
    assert res.makespan == 1.0 + 3 * 2.5 + 2.0
    assert [a[0] for a in res.actions[0]] == ["F", "FB", "FB", "FB", "B"]


@pytest.mark.parametrize("schedule", ["dualpipev", "dualpipe"])
def test_dual_turns_on_one_rank_pay_no_p2p_and_first_forwards_wait_for_their_gather(schedule):
    """DualPipeV's turn (position pp-1 to pp) stays on the last rank: no p2p there, even when p2p costs; a
    rank's first forward of each local chunk waits for that chunk's weight gather (first_f_extra_s)."""
    pp, m = 4, 8
    n = 2 * pp
    res = _dual(schedule, pp, m, 1.0, 2.0, 0.5, pair=2.5, p2p=0.3)
    if schedule == "dualpipev":
        turn_end = res.timeline[("F", pp - 1, 0)][2]
        assert res.timeline[("F", pp, 0)][1] == pytest.approx(turn_end)  # same rank: straight on
        assert res.timeline[("F", 1, 0)][1] >= res.timeline[("F", 0, 0)][2] + 0.3  # next rank: one p2p later
    base = simulate_pipeline(PipelineSpec(schedule, pp, 1, m, [1.0] * n, [2.0] * n, 0.0, (), {}, [0.5] * n))
    gathered = simulate_pipeline(PipelineSpec(schedule, pp, 1, m, [1.0] * n, [2.0] * n, 0.0, [0.25] * n, {},
                                              [0.5] * n))
    # DualPipe runs a rank's two chunks of one position together: both gathers come first
    assert gathered.timeline[("F", 0, 0)][1] == pytest.approx(0.25 if schedule == "dualpipev" else 0.5)
    assert gathered.makespan > base.makespan


def test_combined_single_rank_actions_name_the_forwarded_microbatch():
    res = simulate_pipeline(PipelineSpec("1f1b", 1, 1, 4, [1.0], [2.0], pair_s={(0, 0): 2.5}, combined=True))
    assert [(a[0], a[2]) for a in res.actions[0]] == [("F", 0), ("FB", 1), ("FB", 2), ("FB", 3), ("B", 3)]
