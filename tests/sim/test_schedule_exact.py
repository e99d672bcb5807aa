"""The list-scheduled pipeline (:func:`sim.schedule._run_ranks`) gives the SimPy simulation's timelines bit
for bit, on every schedule, with uneven stage times, p2p delays, FSDP first-forward gathers, overlapped
pairs and zero-bubble W splits (the SimPy processes are kept in ``schedule_simpy_reference``)."""

from __future__ import annotations

import random

import pytest

from sim.errors import PlanError
from sim.schedule import (
    PipelineSpec,
    overlapped_pairs,
    simulate_makespan,
    simulate_pipeline,
)
from tests.sim.schedule_simpy_reference import simulate_pipeline_simpy


def _random_spec(rng: random.Random) -> PipelineSpec:
    schedule = rng.choice(["1f1b", "interleaved-1f1b", "dualpipev", "dualpipe"])
    pp = rng.choice([2, 4, 6, 8]) if schedule == "dualpipe" else rng.choice([2, 3, 4, 8])
    vpp = rng.choice([2, 3]) if schedule == "interleaved-1f1b" else 1
    n_micro = rng.choice([1, 2, 3]) * pp * 2
    stages = pp * (2 if schedule.startswith("dual") else vpp)
    f = [rng.uniform(0.5, 2.0) for _ in range(stages)]
    b = [x * rng.uniform(1.5, 2.5) for x in f]
    spec = PipelineSpec(schedule, pp, vpp, n_micro, f, b, p2p_s=rng.choice([0.0, 0.013, 0.2]),
                        first_f_extra_s=[rng.uniform(0, 0.3) for _ in range(stages)] if rng.random() < 0.5 else (),
                        w_s=[x * rng.uniform(0.2, 0.5) for x in b] if schedule.startswith("dual") else (),
                        combined=schedule in ("1f1b", "interleaved-1f1b") and rng.random() < 0.5)
    pairs = {k: spec.f_s[k[0]] + spec.b_s[k[1]] * rng.uniform(0.6, 1.0) for k in overlapped_pairs(spec)}
    return PipelineSpec(**{**spec.__dict__, "pair_s": pairs})


@pytest.mark.parametrize("seed", range(60))
def test_list_schedule_equals_the_simpy_simulation(seed: int) -> None:
    spec = _random_spec(random.Random(seed))
    try:
        want = simulate_pipeline_simpy(spec)
    except PlanError:
        with pytest.raises(PlanError):
            simulate_pipeline(spec)
        return
    got = simulate_pipeline(spec)
    assert got.makespan == want.makespan == simulate_makespan(spec)  # the unrecorded run: the same float
    assert got.actions == want.actions
    assert got.timeline == want.timeline
    assert got.pair_stages == want.pair_stages


def test_a_wait_on_a_completion_that_never_comes_is_a_deadlock() -> None:
    """A rank parked on a key nobody produces leaves actions unrun: reported, not a silent short makespan."""
    from sim.schedule import _Deps, _run_ranks

    deps = _Deps(2, lambda pos, _mb: pos, 0.0)
    now = [0.0, 0.0]

    def waits_forever():  # type: ignore[no-untyped-def]
        yield 1.0
        yield ("Fa", 0, 7)
        yield 5.0

    _run_ranks(deps, now, [waits_forever(), iter([2.0])])
    assert now == [1.0, 2.0] and deps.parked == {("Fa", 0, 7): [0]}


@pytest.mark.parametrize("seed", range(40))
def test_dualpipe_makespan_from_its_graph_is_the_recorded_runs_float(seed: int) -> None:
    """DualPipe(V)'s makespan evaluated on its dependency graph (no rank programs, no timeline) is the
    recorded run's, bit for bit: uneven stages, p2p, first-forward gathers, pairs and W splits included."""
    rng = random.Random(1000 + seed)
    spec = _random_spec(rng)
    while not spec.schedule.startswith("dual"):
        spec = _random_spec(rng)
    try:
        want = simulate_pipeline(spec).makespan
    except PlanError:
        with pytest.raises(PlanError):
            simulate_makespan(spec)
        return
    assert simulate_makespan(spec) == want
