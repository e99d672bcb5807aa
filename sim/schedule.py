"""Pipeline schedules at chunk granularity, simulated with SimPy.

A pipeline rank runs forward (``F``) and backward (``B``, recompute included) actions of its model chunks
(virtual stages) for every microbatch. ``F(s, mb)`` needs ``F(s-1, mb)`` and its activations sent over
(``p2p_s``); ``B(s, mb)`` needs ``B(s+1, mb)`` and its gradient sent back; the last stage's ``B`` follows
its own ``F``.

- ``1f1b`` and ``interleaved-1f1b`` run the fixed per-rank orders of Megatron/TorchTitan: warm-up
  forwards, one-forward-one-backward steady state, cool-down backwards. Stage ``s`` of chunk ``j`` on rank
  ``p`` is ``j * pp + p``.
- ``dualpipe`` / ``dualpipev`` place two chunks per rank in a V (stages ``p`` and ``2*pp-1-p``; DualPipe's
  two directions are equivalent in timing) and schedule greedily (backward first, forwards capped at
  ``2*pp`` in flight); a ready forward and backward of different microbatches run as one overlapped pair
  of ``pair_s[(f_chunk, b_chunk)]`` seconds (DualPipe's computation-communication overlap).

1F1B on 2 ranks, 2 microbatches, F=1, B=2, no transfer time: the bubble is (pp-1)(F+B).

>>> res = simulate_pipeline(PipelineSpec("1f1b", pp=2, vpp=1, n_micro=2, f_s=[1.0, 1.0], b_s=[2.0, 2.0]))
>>> res.makespan
9.0
>>> res.actions[0][:3]
[('F', 0, 0, 0.0, 1.0), ('F', 0, 1, 1.0, 2.0), ('B', 0, 0, 4.0, 6.0)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import simpy

from sim.errors import PlanError

__all__ = ["PipelineSpec", "PipelineResult", "simulate_pipeline", "stage_of", "rank_orders"]


@dataclass(frozen=True)
class PipelineSpec:
    """Durations per virtual stage ``s`` (``f_s[s]``, ``b_s[s]``), ``p2p_s`` per stage boundary send."""

    schedule: str
    pp: int
    vpp: int
    n_micro: int
    f_s: Sequence[float]
    b_s: Sequence[float]
    p2p_s: float = 0.0
    #: extra seconds before a stage's first forward (FSDP all-gather of its weights), per stage.
    first_f_extra_s: Sequence[float] = ()
    #: overlapped F+B pair duration by (f_stage, b_stage), DualPipe only; missing pairs: F + B.
    pair_s: dict[tuple[int, int], float] = field(default_factory=dict)

    @property
    def n_stages(self) -> int:
        return self.pp * (2 if self.schedule in ("dualpipe", "dualpipev") else self.vpp)


@dataclass
class PipelineResult:
    makespan: float
    #: per pp rank: (phase "F"/"B"/"FB", stage, microbatch, start, end); FB's stage is the F stage.
    actions: list[list[tuple[str, int, int, float, float]]]

    def busy(self, rank: int) -> float:
        return sum(e - s for _, _, _, s, e in self.actions[rank])


def stage_of(schedule: str, pp: int, rank: int, chunk: int) -> int:
    """Virtual stage of ``chunk`` on pipeline ``rank``."""
    if schedule in ("dualpipe", "dualpipev"):
        return rank if chunk == 0 else 2 * pp - 1 - rank
    return chunk * pp + rank


def rank_orders(spec: PipelineSpec) -> list[list[tuple[str, int, int]]]:
    """Fixed (phase, stage, microbatch) orders of 1F1B / interleaved 1F1B, per rank."""
    P, V, m = spec.pp, spec.vpp, spec.n_micro
    if V > 1 and m % P:
        raise PlanError(f"interleaved-1f1b needs the microbatch count ({m}) to be a multiple of pp ({P})")
    total = m * V
    orders = []
    for p in range(P):
        warm = min(total, (P - p - 1) * 2 + (V - 1) * P) if V > 1 else min(m, P - p - 1)

        def fwd(k: int) -> tuple[str, int, int]:
            chunk = (k % (P * V)) // P
            return ("F", chunk * P + p, (k // (P * V)) * P + k % P)

        def bwd(k: int) -> tuple[str, int, int]:
            chunk = V - 1 - (k % (P * V)) // P
            return ("B", chunk * P + p, (k // (P * V)) * P + k % P)

        order = [fwd(k) for k in range(warm)]
        for i in range(total - warm):
            order.append(fwd(warm + i))
            order.append(bwd(i))
        order += [bwd(k) for k in range(total - warm, total)]
        orders.append(order)
    return orders


def simulate_pipeline(spec: PipelineSpec) -> PipelineResult:
    """Run the schedule; returns the makespan and every rank's action timeline."""
    if spec.pp == 1:
        return _single_rank(spec)
    if spec.schedule in ("dualpipe", "dualpipev"):
        return _greedy(spec)
    return _fixed(spec)


def _extra(spec: PipelineSpec, stage: int) -> float:
    return spec.first_f_extra_s[stage] if spec.first_f_extra_s else 0.0


def _single_rank(spec: PipelineSpec) -> PipelineResult:
    t, acts = 0.0, []
    for s in range(spec.n_stages):
        t += _extra(spec, s)
    for mb in range(spec.n_micro):
        for s in range(spec.n_stages):
            acts.append(("F", s, mb, t, t + spec.f_s[s]))
            t += spec.f_s[s]
        for s in reversed(range(spec.n_stages)):
            acts.append(("B", s, mb, t, t + spec.b_s[s]))
            t += spec.b_s[s]
    return PipelineResult(t, [acts])


class _Deps:
    """Completion (arrival) events of every (phase, stage, mb)."""

    def __init__(self, env: simpy.Environment, spec: PipelineSpec) -> None:
        self.env, self.spec = env, spec
        self.events: dict[tuple[str, int, int], simpy.Event] = {}
        self.on_arrival: Callable[[], None] | None = None

    def event(self, key: tuple[str, int, int]) -> simpy.Event:
        ev = self.events.get(key)
        if ev is None:
            ev = self.events[key] = self.env.event()
        return ev

    def needs(self, phase: str, stage: int, mb: int) -> list[tuple[str, int, int]]:
        last = self.spec.n_stages - 1
        if phase == "F":
            return [("Fa", stage - 1, mb)] if stage > 0 else []
        return [("Ba", stage + 1, mb)] if stage < last else [("F", stage, mb)]

    def done(self, phase: str, stage: int, mb: int, stage_rank: dict[int, int]) -> None:
        self.event((phase, stage, mb)).succeed()
        arrival = ("Fa" if phase == "F" else "Ba", stage, mb)
        nxt = stage + 1 if phase == "F" else stage - 1
        same = 0 <= nxt < self.spec.n_stages and stage_rank[nxt] == stage_rank[stage]
        delay = 0.0 if same else self.spec.p2p_s
        if delay > 0:
            self.env.process(self._later(arrival, delay))
        else:
            self.event(arrival).succeed()

    def _later(self, key: tuple[str, int, int], delay: float):  # type: ignore[no-untyped-def]
        yield self.env.timeout(delay)
        self.event(key).succeed()
        if self.on_arrival is not None:
            self.on_arrival()


def _fixed(spec: PipelineSpec) -> PipelineResult:
    env = simpy.Environment(initial_time=0.0)
    deps = _Deps(env, spec)
    orders = rank_orders(spec)
    stage_rank = {stage_of(spec.schedule, spec.pp, p, j): p for p in range(spec.pp) for j in range(spec.vpp)}
    acts: list[list[tuple[str, int, int, float, float]]] = [[] for _ in range(spec.pp)]
    seen: set[int] = set()

    def rank_proc(p: int):  # type: ignore[no-untyped-def]
        for phase, stage, mb in orders[p]:
            for key in deps.needs(phase, stage, mb):
                ev = deps.event(key)
                if not ev.processed:
                    yield ev
            if phase == "F" and stage not in seen:
                seen.add(stage)
                if _extra(spec, stage):
                    yield env.timeout(_extra(spec, stage))
            dur = spec.f_s[stage] if phase == "F" else spec.b_s[stage]
            start = float(env.now)
            yield env.timeout(dur)
            acts[p].append((phase, stage, mb, float(start), float(env.now)))
            deps.done(phase, stage, mb, stage_rank)

    for p in range(spec.pp):
        env.process(rank_proc(p))
    env.run()
    n_done = sum(len(a) for a in acts)
    if n_done != 2 * spec.n_micro * spec.n_stages:
        raise RuntimeError(f"pipeline deadlock: {n_done} of {2 * spec.n_micro * spec.n_stages} actions ran")
    return PipelineResult(max(a[-1][4] for a in acts), acts)


def _greedy(spec: PipelineSpec) -> PipelineResult:
    env = simpy.Environment(initial_time=0.0)
    deps = _Deps(env, spec)
    P, m = spec.pp, spec.n_micro
    stage_rank = {stage_of(spec.schedule, P, p, j): p for p in range(P) for j in range(2)}
    acts: list[list[tuple[str, int, int, float, float]]] = [[] for _ in range(P)]
    wake = [env.event() for _ in range(P)]
    seen: set[int] = set()

    def ready(key: tuple[str, int, int]) -> bool:
        return all(deps.event(k).triggered for k in deps.needs(*key))

    def notify() -> None:
        for p in range(P):
            if not wake[p].triggered:
                wake[p].succeed()

    def rank_proc(p: int):  # type: ignore[no-untyped-def]
        stages = (p, 2 * P - 1 - p)
        todo_f = [("F", s, mb) for mb in range(m) for s in stages]
        todo_b = [("B", s, mb) for mb in range(m) for s in stages]
        in_flight = 0  # microbatches entered through this rank's first chunk and not yet finished there
        cap = 2 * P - p - 1  # DualPipeV warm-up: (P-p-1)*2 chunk-0 forwards, then p+1 F0F1 pairs
        while todo_f or todo_b:
            b = next((k for k in todo_b if ready(k)), None)
            f = next((k for k in todo_f if ready(k) and (k[1] != p or in_flight < cap)), None)
            if b is None and f is None:
                wake[p] = env.event()
                yield wake[p]
                continue
            start = float(env.now)
            if f is not None and f[1] not in seen:
                seen.add(f[1])
                yield env.timeout(_extra(spec, f[1]))
                start = float(env.now)
            if b is not None and f is not None and f[2] != b[2]:
                dur = spec.pair_s.get((f[1], b[1]), spec.f_s[f[1]] + spec.b_s[b[1]])
                yield env.timeout(dur)
                acts[p].append(("FB", f[1], f[2], start, env.now))
                todo_f.remove(f)
                todo_b.remove(b)
                in_flight += (f[1] == p) - (b[1] == p)
                deps.done(*f, stage_rank)
                deps.done(*b, stage_rank)
            elif b is not None:
                yield env.timeout(spec.b_s[b[1]])
                acts[p].append(("B", b[1], b[2], start, env.now))
                todo_b.remove(b)
                in_flight -= b[1] == p
                deps.done(*b, stage_rank)
            else:
                assert f is not None
                yield env.timeout(spec.f_s[f[1]])
                acts[p].append(("F", f[1], f[2], start, env.now))
                todo_f.remove(f)
                in_flight += f[1] == p
                deps.done(*f, stage_rank)
            notify()

    for p in range(P):
        env.process(rank_proc(p))
    deps.on_arrival = notify
    env.run()
    total = sum(1 if a[0] != "FB" else 2 for r in acts for a in r)
    if total != 2 * m * 2 * P:
        raise RuntimeError(f"pipeline deadlock: {total} of {4 * m * P} actions ran")
    return PipelineResult(max(r[-1][4] for r in acts), acts)
