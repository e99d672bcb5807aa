"""The pipeline schedules as SimPy processes: the event-queue simulation :mod:`sim.schedule` replaced with a
list schedule, kept as the reference its timelines must equal bit for bit (tests/sim/test_schedule_exact.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import simpy

from sim.schedule import (
    Key,
    PipelineResult,
    PipelineSpec,
    _check_dual,
    _dual_order,
    _extra,
    _Lanes,
    _pieces,
    combined_orders,
    rank_orders,
    stage_of,
)


def simulate_pipeline_simpy(spec: PipelineSpec) -> PipelineResult:
    """:func:`sim.schedule.simulate_pipeline` for pp > 1, run by SimPy."""
    from sim.schedule import DUAL

    return _dual(spec) if spec.schedule in DUAL else _fixed(spec)


class _Deps:
    """Completions and arrivals of every (phase, position, mb) along a pipeline of ``n_pos`` positions whose
    position ``pos`` runs microbatch ``mb`` on rank ``rank_of(pos, mb)``. A SimPy event exists only for a
    key some rank waits on before it has happened; the rest are just remembered as done."""

    def __init__(self, env: simpy.Environment, n_pos: int, rank_of: Callable[[int, int], int], p2p_s: float) -> None:
        self.env, self.n_pos, self.rank_of, self.p2p_s = env, n_pos, rank_of, p2p_s
        self.events: dict[tuple[str, int, int], simpy.Event] = {}
        self.happened: set[tuple[str, int, int]] = set()

    def needs(self, phase: str, pos: int, mb: int) -> tuple[str, int, int] | None:
        """What ``phase`` of ``(pos, mb)`` waits for: the arrival from the neighbour (or, the last
        position's backward, its own forward); None for the first position's forward."""
        if phase == "F":
            return ("Fa", pos - 1, mb) if pos > 0 else None
        return ("Ba", pos + 1, mb) if pos < self.n_pos - 1 else ("F", pos, mb)

    def wait(self, phase: str, pos: int, mb: int) -> Iterator[simpy.Event]:
        """The event still pending before ``phase`` of ``(pos, mb)`` may start (yield each from a process)."""
        key = self.needs(phase, pos, mb)
        if key is not None and key not in self.happened:
            ev = self.events.get(key)
            if ev is None:
                ev = self.events[key] = self.env.event()
            yield ev

    def _happen(self, key: tuple[str, int, int]) -> None:
        self.happened.add(key)
        ev = self.events.pop(key, None)
        if ev is not None:
            ev.succeed()

    def done(self, phase: str, pos: int, mb: int) -> None:
        self._happen((phase, pos, mb))
        arrival = ("Fa" if phase == "F" else "Ba", pos, mb)
        nxt = pos + 1 if phase == "F" else pos - 1
        same = 0 <= nxt < self.n_pos and self.rank_of(nxt, mb) == self.rank_of(pos, mb)
        if same or self.p2p_s <= 0:
            self._happen(arrival)
        else:  # the activation (or gradient) arrives one p2p transfer later
            self.env.timeout(self.p2p_s).callbacks.append(lambda _t: self._happen(arrival))


def _fixed(spec: PipelineSpec) -> PipelineResult:
    env = simpy.Environment(initial_time=0.0)
    stage_rank = {stage_of(spec.schedule, spec.pp, p, j): p for p in range(spec.pp) for j in range(spec.vpp)}
    deps = _Deps(env, spec.n_stages, lambda s, _mb: stage_rank[s], spec.p2p_s)
    orders = combined_orders(spec) if spec.combined else [[(a,) for a in o] for o in rank_orders(spec)]
    acts: list[list[tuple[str, int, int, float, float]]] = [[] for _ in range(spec.pp)]
    timeline: dict[Key, tuple[int, float, float]] = {}
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    seen: set[int] = set()

    def rank_proc(p: int):  # type: ignore[no-untyped-def]
        for keys in orders[p]:
            for phase, stage, mb in keys:
                yield from deps.wait(phase, stage, mb)
            for phase, stage, _mb in keys:
                if phase == "F" and stage not in seen:
                    seen.add(stage)
                    if _extra(spec, stage):
                        yield env.timeout(_extra(spec, stage))
            if len(keys) == 2:
                (_, fs, fmb), (_, bs, _bmb) = keys
                dur = spec.pair_s.get((fs, bs), spec.f_s[fs] + spec.b_s[bs])
                pairs[(p, len(acts[p]))] = (fs, bs)
                head = ("FB", fs, fmb)
            else:
                phase, stage, mb = keys[0]
                dur = spec.f_s[stage] if phase == "F" else spec.b_s[stage]
                head = keys[0]
            start = float(env.now)
            yield env.timeout(dur)
            acts[p].append((*head, float(start), float(env.now)))
            for key in keys:
                timeline[key] = (p, start, float(env.now))
            for key in keys:
                deps.done(*key)

    for p in range(spec.pp):
        env.process(rank_proc(p))
    env.run()
    n_done = len(timeline)
    if n_done != 2 * spec.n_micro * spec.n_stages:
        raise RuntimeError(f"pipeline deadlock: {n_done} of {2 * spec.n_micro * spec.n_stages} actions ran")
    return PipelineResult(max(a[-1][4] for a in acts), acts, timeline, pairs)


def _dual(spec: PipelineSpec) -> PipelineResult:
    _check_dual(spec)
    lanes = _Lanes(spec)
    env = simpy.Environment(initial_time=0.0)
    deps = _Deps(env, lanes.n_pos, lanes.rank, spec.p2p_s)
    acts: list[list[tuple[str, int, int, float, float]]] = [[] for _ in range(spec.pp)]
    timeline: dict[Key, tuple[int, float, float]] = {}
    pairs: dict[tuple[int, int], tuple[int, int]] = {}

    def rank_proc(p: int):  # type: ignore[no-untyped-def]
        gathered: set[int] = set()  # chunks whose weights this rank has all-gathered
        for act in _dual_order(lanes, p):
            kind, f, b = act
            if f is not None:
                yield from deps.wait("F", *f)
            if b is not None and kind != "W":
                yield from deps.wait("B", *b)
            for c in lanes.chunks(f[0]) if f is not None else ():
                if c not in gathered:
                    gathered.add(c)
                    if _extra(spec, c):
                        yield env.timeout(_extra(spec, c))
            start = float(env.now)
            pieces = _pieces(spec, lanes, act)
            yield env.timeout(sum(piece[3] for piece in pieces))
            t = start
            for i, (phase, c, mb, d, keys) in enumerate(pieces):
                end = float(env.now) if i == len(pieces) - 1 else t + d
                if d > 0 or phase != "W":
                    if phase == "FB":
                        pairs[(p, len(acts[p]))] = (c, keys[1][1])
                    acts[p].append((phase, c, mb, t, end))
                for key in keys:
                    assert key not in timeline, key
                    timeline[key] = (p, t, end)
                t = end
            if f is not None:
                deps.done("F", *f)
            if b is not None and kind != "W":
                deps.done("B", *b)

    for p in range(spec.pp):
        env.process(rank_proc(p))
    env.run()
    n_fb = sum(1 for key in timeline if key[0] != "W")
    if n_fb != 2 * spec.n_micro * spec.n_stages:
        raise RuntimeError(f"pipeline deadlock: {n_fb} of {2 * spec.n_micro * spec.n_stages} actions ran")
    return PipelineResult(max(a[4] for r in acts for a in r), acts, timeline, pairs)
