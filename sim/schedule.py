"""Pipeline schedules at chunk granularity, simulated as list schedules (:func:`_run_ranks`).

A pipeline rank runs forward (``F``) and backward (``B``, recompute included) actions of its model chunks
(virtual stages) for every microbatch. ``F(s, mb)`` needs ``F(s-1, mb)`` and its activations sent over
(``p2p_s``); ``B(s, mb)`` needs ``B(s+1, mb)`` and its gradient sent back; the last stage's ``B`` follows
its own ``F``.

- ``1f1b`` and ``interleaved-1f1b`` run the fixed per-rank orders of Megatron/TorchTitan: warm-up
  forwards, one-forward-one-backward steady state, cool-down backwards. Stage ``s`` of chunk ``j`` on rank
  ``p`` is ``j * pp + p``.
- ``dualpipev`` runs the fixed per-rank step order of deepseek-ai/DualPipe's DualPipeV
  (:func:`dualpipev_steps`) on a V: rank ``p`` holds stages ``p`` and ``2*pp-1-p``. In its main loop a
  forward and a backward of different microbatches run as one overlapped pair of
  ``pair_s[(f_stage, b_stage)]`` seconds (the all-to-all of one hides under the compute of the other). Some
  warm-up and cool-down backwards are split zero-bubble style: the input gradient (``B - W``) runs at once,
  the weight gradient ``W`` (``w_s``) later, in a bubble.
- ``dualpipe`` is bidirectional: half the microbatches enter at rank 0, half at rank ``pp-1``, through two
  copies of a ``pp``-stage model whose stage ``k`` is chunks ``2k`` and ``2k+1`` of the ``2*pp`` chunks given
  (rank ``p`` runs stage ``p`` of one direction and ``pp-1-p`` of the other). Ranks ``p`` and ``pp-1-p`` run
  the DualPipeV step order of rank ``min(p, pp-1-p)`` of ``pp/2``, as the reference implementation does;
  with equal costs DualPipe on ``pp`` ranks therefore times like DualPipeV on ``pp/2`` ranks with half the
  microbatches and doubled chunks, not like DualPipeV on ``pp`` ranks (its bubble is one chunk shorter).

1F1B on 2 ranks, 2 microbatches, F=1, B=2, no transfer time: the bubble is (pp-1)(F+B).

>>> res = simulate_pipeline(PipelineSpec("1f1b", pp=2, vpp=1, n_micro=2, f_s=[1.0, 1.0], b_s=[2.0, 2.0]))
>>> res.makespan
9.0
>>> res.actions[0][:3]
[('F', 0, 0, 0.0, 1.0), ('F', 0, 1, 1.0, 2.0), ('B', 0, 0, 4.0, 6.0)]

DualPipeV on 2 ranks, 4 microbatches, F=1, B=2, W=1, no overlap: (pp-1)(F+B+B-3W) = 2 of bubble
over the 4 * 2 * 3 = 24 of work per rank.

>>> simulate_pipeline(PipelineSpec("dualpipev", 2, 1, 4, [1.0] * 4, [2.0] * 4, w_s=[1.0] * 4)).makespan
26.0
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from sim.errors import PlanError

__all__ = ["PipelineResult", "PipelineSpec", "combined_orders", "dual_work", "dualpipev_steps", "overlapped_pairs",
           "rank_orders", "simulate_makespan", "simulate_pipeline", "stage_of"]

DUAL = ("dualpipe", "dualpipev")

#: (phase, stage, microbatch): one action of the schedule; phase "F", "B" or "W".
Key = tuple[str, int, int]


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
    #: weight-gradient part of ``b_s`` per stage, DualPipe only (zero-bubble split); empty: no split.
    w_s: Sequence[float] = ()
    #: Megatron's combined 1F1B (1f1b / interleaved-1f1b, and pp = 1): one more warm-up forward, then
    #: every steady-state forward runs together with the next backward as one overlapped pair of
    #: ``pair_s[(f_stage, b_stage)]`` seconds.
    combined: bool = False
    #: the sender waits for its own sends (Megatron's non-interleaved 1F1B: batched p2p, ``wait_on_reqs``):
    #: after every action whose output goes to another rank, that rank is busy ``p2p_s`` more.
    blocking_p2p: bool = False

    @property
    def n_stages(self) -> int:
        return self.pp * (2 if self.schedule in DUAL else self.vpp)


@dataclass
class PipelineResult:
    makespan: float
    #: per pp rank: (phase "F"/"B"/"W"/"FB", stage, microbatch, start, end); FB's stage is the F stage.
    actions: list[list[tuple[str, int, int, float, float]]]
    #: every (phase, stage, microbatch) -> (rank, start, end) of the action that ran it (a pair runs two).
    timeline: dict[Key, tuple[int, float, float]] = field(default_factory=dict)
    #: (rank, index in ``actions[rank]``) of each overlapped pair -> (forward stage, backward stage).
    pair_stages: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)

    def busy(self, rank: int) -> float:
        return sum(e - s for _, _, _, s, e in self.actions[rank])


def stage_of(schedule: str, pp: int, rank: int, chunk: int) -> int:
    """Virtual stage of ``chunk`` on pipeline ``rank`` (DualPipe: chunks 0-1 of one direction, 2-3 of the other).

    >>> [stage_of("dualpipev", 4, 1, j) for j in range(2)], [stage_of("dualpipe", 4, 1, j) for j in range(4)]
    ([1, 6], [2, 3, 4, 5])
    """
    if schedule == "dualpipev":
        return rank if chunk == 0 else 2 * pp - 1 - rank
    if schedule == "dualpipe":
        return 2 * (rank if chunk < 2 else pp - 1 - rank) + chunk % 2
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


def combined_orders(spec: PipelineSpec) -> list[list[tuple[Key, ...]]]:
    """Per-rank actions of Megatron's combined 1F1B: :func:`rank_orders` with one more warm-up forward
    (the last stage's backward of microbatch ``i`` then never waits on the forward it is paired with),
    and each steady-state ``(F, B)`` merged into one two-key pair.

    >>> combined_orders(PipelineSpec("1f1b", 2, 1, 3, [1.0] * 2, [2.0] * 2, combined=True))[1]
    [(('F', 1, 0),), (('F', 1, 1), ('B', 1, 0)), (('F', 1, 2), ('B', 1, 1)), (('B', 1, 2),)]
    """
    out = []
    for order in rank_orders(spec):
        fwd = [a for a in order if a[0] == "F"]
        bwd = [a for a in order if a[0] == "B"]
        # rank_orders' steady state starts with a forward: the forwards before the first backward are its
        # warm-up plus one, the combined schedule's warm-up.
        warm = sum(1 for a in order[: order.index(bwd[0])] if a[0] == "F") if bwd else len(fwd)
        acts: list[tuple[Key, ...]] = [(f,) for f in fwd[:warm]]
        steady = len(fwd) - warm
        acts += [(fwd[warm + i], bwd[i]) for i in range(steady)]
        acts += [(b,) for b in bwd[steady:]]
        out.append(acts)
    return out


def simulate_pipeline(spec: PipelineSpec) -> PipelineResult:
    """Run the schedule; returns the makespan and every rank's action timeline."""
    if spec.pp == 1:
        return _single_rank(spec)
    if spec.schedule in DUAL:
        return _dual(spec)
    return _fixed(spec)


def simulate_makespan(spec: PipelineSpec) -> float:
    """:func:`simulate_pipeline`'s makespan (the same float), without recording the timeline where that
    saves time (DualPipe(V))."""
    if spec.pp > 1 and spec.schedule in DUAL:
        return _dual_makespan(spec)
    return simulate_pipeline(spec).makespan


def overlapped_pairs(spec: PipelineSpec) -> set[tuple[int, int]]:
    """The (forward stage, backward stage) pairs the schedule runs overlapped: the keys of ``pair_s`` it will
    read (durations in ``spec`` are not used). Empty when nothing overlaps.

    >>> sorted(overlapped_pairs(PipelineSpec("dualpipev", 2, 1, 8, [1.0] * 4, [2.0] * 4)))
    [(0, 3), (1, 2), (2, 1), (3, 0)]
    """
    if spec.pp == 1:
        return {(0, 0)} if spec.combined and spec.n_stages == 1 and spec.n_micro > 1 else set()
    if spec.schedule in DUAL:
        _check_dual(spec)
        recipes = _dual_steps(spec.schedule, spec.pp, spec.n_micro).recipes
        return {pair for kind, fc, bc in recipes if kind == "FB" for pair in zip(fc, bc)}
    if not spec.combined:
        return set()
    return {(keys[0][1], keys[1][1]) for order in combined_orders(spec) for keys in order if len(keys) == 2}


def _extra(spec: PipelineSpec, stage: int) -> float:
    return spec.first_f_extra_s[stage] if spec.first_f_extra_s else 0.0


def _single_rank(spec: PipelineSpec) -> PipelineResult:
    t, acts = 0.0, []
    for s in range(spec.n_stages):
        t += _extra(spec, s)
    if spec.combined and spec.n_stages == 1 and spec.n_micro > 1:
        # Megatron's combined 1F1B without pipelining: F0, (F(i+1) with B(i)) pairs, B(m-1).
        timeline: dict[Key, tuple[int, float, float]] = {}
        pairs: dict[tuple[int, int], tuple[int, int]] = {}
        acts.append(("F", 0, 0, t, t + spec.f_s[0]))
        timeline[("F", 0, 0)] = (0, t, t + spec.f_s[0])
        t += spec.f_s[0]
        for mb in range(spec.n_micro - 1):
            d = spec.pair_s.get((0, 0), spec.f_s[0] + spec.b_s[0])
            pairs[(0, len(acts))] = (0, 0)
            acts.append(("FB", 0, mb + 1, t, t + d))
            timeline[("F", 0, mb + 1)] = timeline[("B", 0, mb)] = (0, t, t + d)
            t += d
        acts.append(("B", 0, spec.n_micro - 1, t, t + spec.b_s[0]))
        timeline[("B", 0, spec.n_micro - 1)] = (0, t, t + spec.b_s[0])
        t += spec.b_s[0]
        return PipelineResult(t, [acts], timeline, pairs)
    for mb in range(spec.n_micro):
        for s in range(spec.n_stages):
            acts.append(("F", s, mb, t, t + spec.f_s[s]))
            t += spec.f_s[s]
        for s in reversed(range(spec.n_stages)):
            acts.append(("B", s, mb, t, t + spec.b_s[s]))
            t += spec.b_s[s]
    return PipelineResult(t, [acts], {(ph, s, mb): (0, a, b) for ph, s, mb, a, b in acts})


class _Deps:
    """Completions and arrivals of every (phase, position, mb) along a pipeline of ``n_pos`` positions whose
    position ``pos`` runs microbatch ``mb`` on rank ``rank_of(pos, mb)``: when each happened, and which
    parked ranks wait on one that has not happened yet."""

    def __init__(self, n_pos: int, rank_of: Callable[[int, int], int], p2p_s: float) -> None:
        self.n_pos, self.rank_of, self.p2p_s = n_pos, rank_of, p2p_s
        self.at: dict[Key, float] = {}
        self.parked: dict[Key, list[int]] = {}
        self.ready: deque[int] = deque()

    def needs(self, phase: str, pos: int, mb: int) -> Key | None:
        """What ``phase`` of ``(pos, mb)`` waits for: the arrival from the neighbour (or, the last
        position's backward, its own forward); None for the first position's forward."""
        if phase == "F":
            return ("Fa", pos - 1, mb) if pos > 0 else None
        return ("Ba", pos + 1, mb) if pos < self.n_pos - 1 else ("F", pos, mb)

    def wait(self, phase: str, pos: int, mb: int) -> Iterator[Key]:
        """The key ``phase`` of ``(pos, mb)`` waits on, if any (``yield from`` it in a rank's program)."""
        key = self.needs(phase, pos, mb)
        if key is not None:
            yield key

    def _happen(self, key: Key, t: float) -> None:
        self.at[key] = t
        woken = self.parked.pop(key, None)
        if woken:
            self.ready.extend(woken)

    def done(self, phase: str, pos: int, mb: int, t: float) -> None:
        """``phase`` of ``(pos, mb)`` ended at ``t``; its activation (or gradient) arrives one p2p transfer
        later, or at once on the same rank."""
        self._happen((phase, pos, mb), t)
        nxt = pos + 1 if phase == "F" else pos - 1
        same = 0 <= nxt < self.n_pos and self.rank_of(nxt, mb) == self.rank_of(pos, mb)
        self._happen(("Fa" if phase == "F" else "Ba", pos, mb), t if same or self.p2p_s <= 0 else t + self.p2p_s)


#: A rank's program: yields seconds to run, or a :class:`_Deps` key to wait on.
_Program = Iterator["float | Key"]


def _run_ranks(deps: _Deps, now: list[float], programs: list[_Program]) -> None:
    """Run one program per pipeline rank, each on its own clock ``now[p]``.

    A rank's actions run one after another in a fixed order and ranks couple only through the completions
    they wait on, with no resource shared between ranks: the schedule's timeline is the longest path through
    that dependency graph. A rank that waits on a key resumes at ``max(now, when the key happened)``; one
    whose key has not happened yet is parked until it has. This is the discrete-event simulation of such a
    schedule without an event queue (a SimPy run of the same programs gives the same floating-point times:
    each clock advances by ``now + seconds``). Ranks left parked are a deadlock, which the callers report
    by counting the actions that ran.
    """
    at = deps.at
    waiting: list[Key | None] = [None] * len(programs)
    deps.ready.extend(range(len(programs)))
    while deps.ready:
        p = deps.ready.popleft()
        key = waiting[p]
        if key is not None:
            waiting[p] = None
            if at[key] > now[p]:
                now[p] = at[key]
        for item in programs[p]:
            if isinstance(item, tuple):
                t = at.get(item)
                if t is None:
                    waiting[p] = item
                    deps.parked.setdefault(item, []).append(p)
                    break
                if t > now[p]:
                    now[p] = t
            else:
                now[p] = now[p] + item


def _fixed(spec: PipelineSpec) -> PipelineResult:
    stage_rank = {stage_of(spec.schedule, spec.pp, p, j): p for p in range(spec.pp) for j in range(spec.vpp)}
    deps = _Deps(spec.n_stages, lambda s, _mb: stage_rank[s], spec.p2p_s)
    now = [0.0] * spec.pp
    orders = combined_orders(spec) if spec.combined else [[(a,) for a in o] for o in rank_orders(spec)]
    acts: list[list[tuple[str, int, int, float, float]]] = [[] for _ in range(spec.pp)]
    timeline: dict[Key, tuple[int, float, float]] = {}
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    seen: set[int] = set()

    def rank_proc(p: int) -> _Program:
        for keys in orders[p]:
            for phase, stage, mb in keys:
                yield from deps.wait(phase, stage, mb)
            for phase, stage, _mb in keys:
                if phase == "F" and stage not in seen:
                    seen.add(stage)
                    if _extra(spec, stage):
                        yield _extra(spec, stage)
            if len(keys) == 2:
                (_, fs, fmb), (_, bs, _bmb) = keys
                dur = spec.pair_s.get((fs, bs), spec.f_s[fs] + spec.b_s[bs])
                pairs[(p, len(acts[p]))] = (fs, bs)
                head = ("FB", fs, fmb)
            else:
                phase, stage, mb = keys[0]
                dur = spec.f_s[stage] if phase == "F" else spec.b_s[stage]
                head = keys[0]
            start = now[p]
            yield dur
            acts[p].append((*head, start, now[p]))
            for key in keys:
                timeline[key] = (p, start, now[p])
            for key in keys:
                deps.done(*key, now[p])
            if spec.blocking_p2p and spec.p2p_s > 0 and any(_sends_away(key) for key in keys):
                yield spec.p2p_s  # the batched send/recv completes before the rank goes on

    def _sends_away(key: Key) -> bool:
        phase, stage, _mb = key
        nxt = stage + 1 if phase == "F" else stage - 1
        return 0 <= nxt < spec.n_stages and stage_rank[nxt] != stage_rank[stage]

    _run_ranks(deps, now, [rank_proc(p) for p in range(spec.pp)])
    n_done = len(timeline)
    if n_done != 2 * spec.n_micro * spec.n_stages:
        raise RuntimeError(f"pipeline deadlock: {n_done} of {2 * spec.n_micro * spec.n_stages} actions ran")
    return PipelineResult(max(a[-1][4] for a in acts), acts, timeline, pairs)


# --- DualPipe / DualPipeV ------------------------------------------------------------------------------

#: One DualPipe step, in a rank's local chunks (0: the V's first leg, 1: its second leg): ``("F", c)`` forward,
#: ``("B", c)`` full backward, ``("I", c)`` input-gradient backward with its weight gradient deferred,
#: ``("W", -1)`` the oldest deferred weight gradient, ``("FB", c)`` forward of ``c`` overlapped with the full
#: backward of ``1 - c``.
Step = tuple[str, int]


def dualpipev_steps(pp: int, n_micro: int, rank: int) -> list[Step]:
    """DualPipeV's fixed step order on ``rank`` of ``pp`` ranks for ``n_micro`` microbatches.

    The eight steps of deepseek-ai/DualPipe, with ``warm = pp - rank - 1`` and ``late = rank + 1``:
    1. ``2 * warm`` chunk-0 forwards; 2. ``late`` forward pairs (chunk 0, then chunk 1);
    3. ``warm`` x (chunk-1 input-gradient backward, its W, chunk-1 forward);
    4. ``n_micro - 2 * pp + late`` x (F0 & B1 overlapped, F1 & B0 overlapped), the tip rank running its first
    F0 and B1 apart; 5. ``warm`` x (B1, F1 & B0); 6. ``late`` x (B1, B0), deferring W from the middle on
    (rank-parity decides whether the middle B1 defers); 7. ``warm`` x (W, input-gradient B0); 8. ``late`` W.

    >>> dualpipev_steps(2, 4, 0)  # doctest: +NORMALIZE_WHITESPACE
    [('F', 0), ('F', 0), ('F', 0), ('F', 1), ('I', 1), ('W', -1), ('F', 1), ('FB', 0), ('FB', 1),
     ('B', 1), ('FB', 1), ('B', 1), ('I', 0), ('W', -1), ('I', 0), ('W', -1)]
    """
    if n_micro < 2 * pp:
        raise PlanError(f"dualpipev with pp ({pp}) needs at least {2 * pp} microbatches, got {n_micro}")
    warm, late = pp - rank - 1, rank + 1
    steps: list[Step] = [("F", 0)] * (2 * warm)
    steps += [("F", 0), ("F", 1)] * late
    steps += [("I", 1), ("W", -1), ("F", 1)] * warm
    for i in range(n_micro - 2 * pp + late):
        steps += [("F", 0), ("B", 1)] if i == 0 and rank == pp - 1 else [("FB", 0)]
        steps.append(("FB", 1))
    steps += [("B", 1), ("FB", 1)] * warm
    mid = late // 2
    for i in range(late):
        steps.append(("I" if i > mid or (i == mid and rank % 2) else "B", 1))
        steps.append(("I" if i >= mid else "B", 0))
    steps += [("W", -1), ("I", 0)] * warm
    steps += [("W", -1)] * late
    return steps


def _check_dual(spec: PipelineSpec) -> None:
    P, m = spec.pp, spec.n_micro
    if spec.schedule == "dualpipe" and P % 2:
        raise PlanError(f"dualpipe needs an even pp (two mirrored halves), got pp ({P})")
    if spec.schedule == "dualpipe" and m % 2:
        raise PlanError(f"dualpipe feeds half the microbatches from each end: needs an even count, got {m}")
    if m < 2 * P:
        raise PlanError(f"{spec.schedule} with pp ({P}) needs at least {2 * P} microbatches, got {m}")
    if spec.w_s:
        bad = [(i, w, b) for i, (w, b) in enumerate(zip(spec.w_s, spec.b_s, strict=True)) if not 0.0 <= w <= b]
        if bad:
            i, w, b = bad[0]
            raise PlanError(f"{spec.schedule}: chunk {i}'s weight-gradient part W ({w}) must lie in 0..B ({b})")


@dataclass(frozen=True)
class _Lanes:
    """Where DualPipe(V) runs what. A lane is one pipeline through the whole model; position ``pos`` of a
    lane runs ``chunks(pos)`` on ``rank(pos, mb)``. DualPipeV: one lane of ``2*pp`` single chunks folded into
    a V. DualPipe: lane 0 (microbatches ``< m/2``) runs stage ``k`` on rank ``k``, lane 1 on rank ``pp-1-k``."""

    spec: PipelineSpec

    @property
    def bidirectional(self) -> bool:
        return self.spec.schedule == "dualpipe"

    @property
    def n_pos(self) -> int:
        return self.spec.pp if self.bidirectional else 2 * self.spec.pp

    def rank(self, pos: int, mb: int) -> int:
        P = self.spec.pp
        if self.bidirectional:
            return pos if mb < self.spec.n_micro // 2 else P - 1 - pos
        return pos if pos < P else 2 * P - 1 - pos

    def chunks(self, pos: int) -> tuple[int, ...]:
        return (2 * pos, 2 * pos + 1) if self.bidirectional else (pos,)

    def legs(self, rank: int) -> tuple[tuple[int, range], tuple[int, range]]:
        """(position, microbatches in order) of the rank's local chunks 0 and 1."""
        P, m = self.spec.pp, self.spec.n_micro
        if not self.bidirectional:
            return (rank, range(m)), (2 * P - 1 - rank, range(m))
        down, up = range(m // 2), range(m // 2, m)
        return ((rank, down), (P - 1 - rank, up)) if rank < P // 2 else ((P - 1 - rank, up), (rank, down))

    def steps(self, rank: int) -> list[Step]:
        P, m = self.spec.pp, self.spec.n_micro
        if self.bidirectional:
            return dualpipev_steps(P // 2, m // 2, min(rank, P - 1 - rank))
        return dualpipev_steps(P, m, rank)


#: (lane position, microbatch) of one forward or backward.
_At = tuple[int, int]
#: A resolved DualPipe step: (kind, forward or None, backward or None).
_Act = tuple[str, _At | None, _At | None]


def _dual_order(lanes: _Lanes, rank: int) -> tuple[_Act, ...]:
    """The rank's steps with each local chunk's next microbatch filled in (W: the oldest deferred one);
    memoised: they depend only on the schedule, ``pp`` and the microbatch count."""
    return _dual_order_of(lanes.spec.schedule, lanes.spec.pp, lanes.spec.n_micro, rank)


@lru_cache(maxsize=256)
def _shape_lanes(schedule: str, pp: int, n_micro: int) -> _Lanes:
    """The lanes of one DualPipe(V) shape (schedule, pp, microbatches), durations left out; checked."""
    shape = PipelineSpec(schedule, pp, 1, n_micro, [0.0] * 2 * pp, [0.0] * 2 * pp)
    _check_dual(shape)
    return _Lanes(shape)


@lru_cache(maxsize=4096)
def _dual_order_of(schedule: str, pp: int, n_micro: int, rank: int) -> tuple[_Act, ...]:
    lanes = _shape_lanes(schedule, pp, n_micro)
    legs = lanes.legs(rank)
    n_f, n_b = [0, 0], [0, 0]
    deferred: deque[_At] = deque()

    def take(count: list[int], c: int) -> _At:
        pos, mbs = legs[c]
        count[c] += 1
        return pos, mbs[count[c] - 1]

    out: list[_Act] = []
    for kind, c in lanes.steps(rank):
        if kind == "F":
            out.append(("F", take(n_f, c), None))
        elif kind in ("B", "I"):
            b = take(n_b, c)
            out.append((kind, None, b))
            if kind == "I":
                deferred.append(b)
        elif kind == "W":
            out.append(("W", None, deferred.popleft()))
        else:
            out.append(("FB", take(n_f, c), take(n_b, 1 - c)))
    assert not deferred and n_f == n_b == [len(legs[0][1]), len(legs[1][1])]
    return tuple(out)


@lru_cache(maxsize=256)
def dual_work(schedule: str, pp: int, n_micro: int) -> tuple[dict[tuple[str, int, int], int], ...]:
    """Per rank of a DualPipe(V) schedule: how often it runs each (phase, forward stage, backward stage):
    ``("F", s, -1)`` a forward alone, ``("B", -1, s)`` a backward alone (with its weight gradients, or
    without them and a ``W`` later: together the same work), ``("FB", f, b)`` an overlapped pair. Durations
    do not enter: what a rank must run whatever they are (:func:`studies.bounds.pipeline_compute_bound_s`).

    >>> work = dual_work("dualpipev", 2, 4)
    >>> sorted(work[0].items())
    [(('B', -1, 0), 2), (('B', -1, 3), 3), (('F', 0, -1), 3), (('F', 3, -1), 2), (('FB', 0, 3), 1), (('FB', 3, 0), 2)]
    """
    g = _dual_steps(schedule, pp, n_micro)
    out = []
    for counts in (Counter(rank_steps) for rank_steps in g.recipe):  # recipe -> count, in first-run order
        work: Counter[tuple[str, int, int]] = Counter()
        for r, n in counts.items():
            kind, fc, bc = g.recipes[r]
            if kind == "F":
                work.update({("F", c, -1): n for c in fc})
            elif kind in ("B", "I"):
                work.update({("B", -1, c): n for c in bc[::-1]})  # counted in chunk order
            elif kind == "FB":
                work.update({("FB", cf, cb): n for cf, cb in zip(fc, bc)})
        out.append(dict(work))
    return tuple(out)


def _piece_seconds(spec: PipelineSpec, kind: str, f_chunks: tuple[int, ...], b_chunks: tuple[int, ...]
                   ) -> list[float]:
    """Seconds of each piece of one step of ``kind`` on forward chunks ``f_chunks`` and backward chunks
    ``b_chunks`` (in run order: a step's backward chunks run last first)."""
    if kind == "F":
        return [spec.f_s[c] for c in f_chunks]
    if kind == "FB":
        return [spec.pair_s.get((cf, cb), spec.f_s[cf] + spec.b_s[cb]) for cf, cb in zip(f_chunks, b_chunks)]
    w = spec.w_s or [0.0] * spec.n_stages
    if kind == "W":
        return [w[c] for c in b_chunks]
    return [spec.b_s[c] - (w[c] if kind == "I" else 0.0) for c in b_chunks]


def _pieces(spec: PipelineSpec, lanes: _Lanes, act: _Act) -> list[tuple[str, int, int, float, tuple[Key, ...]]]:
    """(phase, chunk, mb, seconds, timeline keys) of one step, chunk by chunk (DualPipe: two chunks a step)."""
    kind, f, b = act
    f_chunks = lanes.chunks(f[0]) if f is not None else ()
    b_chunks = lanes.chunks(b[0])[::-1] if b is not None else ()
    seconds = _piece_seconds(spec, kind, f_chunks, b_chunks)
    if kind == "F":
        assert f is not None
        return [("F", c, f[1], d, (("F", c, f[1]),)) for c, d in zip(f_chunks, seconds)]
    assert b is not None
    if kind == "FB":
        assert f is not None
        return [("FB", cf, f[1], d, (("F", cf, f[1]), ("B", cb, b[1])))
                for cf, cb, d in zip(f_chunks, b_chunks, seconds)]
    phase = "W" if kind == "W" else "B"
    return [(phase, c, b[1], d, ((phase, c, b[1]),)) for c, d in zip(b_chunks, seconds)]


#: One step's pieces as :func:`_piece_seconds` times them: (kind, forward chunks, backward chunks in run order).
_Recipe = tuple[str, tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True)
class _DualSteps:
    """DualPipe(V)'s steps for one (schedule, pp, microbatches), durations left out: per rank, each step's
    index into ``recipes``, in the rank's order (:func:`_dual_order`)."""

    recipe: tuple[tuple[int, ...], ...]
    recipes: tuple[_Recipe, ...]


@lru_cache(maxsize=256)
def _dual_steps(schedule: str, pp: int, n_micro: int) -> _DualSteps:
    lanes = _shape_lanes(schedule, pp, n_micro)
    recipes: dict[_Recipe, int] = {}
    per_rank = []
    for p in range(pp):
        per_rank.append(tuple(
            recipes.setdefault((kind, lanes.chunks(f[0]) if f is not None else (),
                                lanes.chunks(b[0])[::-1] if b is not None else ()), len(recipes))
            for kind, f, b in _dual_order(lanes, p)))
    return _DualSteps(tuple(per_rank), tuple(recipes))


@dataclass(frozen=True)
class _DualGraph:
    """DualPipe(V)'s steps (:func:`_dual_steps`) as a dependency graph, in an order where every step comes
    after the ones it waits on (:func:`_dual_graph`).

    Step ``a`` runs on ``rank[a]`` after that rank's previous step and after each ``(producer, sent)`` of
    ``deps[a]`` (``sent``: one p2p transfer later, the producer is on another rank); first the weight
    gathers of ``extras[a]`` (chunks its rank gathers for the first time), then the pieces of
    ``recipes[recipe[a]]``, as :func:`_pieces` lists them."""

    rank: tuple[int, ...]
    deps: tuple[tuple[tuple[int, bool], ...], ...]
    extras: tuple[tuple[int, ...], ...]
    recipe: tuple[int, ...]
    recipes: tuple[_Recipe, ...]


@lru_cache(maxsize=256)
def _dual_graph(schedule: str, pp: int, n_micro: int) -> _DualGraph:
    steps = _dual_steps(schedule, pp, n_micro)
    lanes = _shape_lanes(schedule, pp, n_micro)
    orders = [_dual_order(lanes, p) for p in range(pp)]
    producer: dict[Key, tuple[int, int]] = {}  # (phase, pos, mb) -> (rank, index in its order)
    for p, order in enumerate(orders):
        for i, (kind, f, b) in enumerate(order):
            if f is not None:
                producer[("F", *f)] = (p, i)
            if b is not None and kind != "W":
                producer[("B", *b)] = (p, i)

    def waits(kind: str, f: _At | None, b: _At | None) -> list[tuple[tuple[int, int], bool]]:
        out = []
        if f is not None and f[0] > 0:
            out.append((producer[("F", f[0] - 1, f[1])], lanes.rank(f[0] - 1, f[1]) != lanes.rank(*f)))
        if b is not None and kind != "W":
            if b[0] < lanes.n_pos - 1:
                out.append((producer[("B", b[0] + 1, b[1])], lanes.rank(b[0] + 1, b[1]) != lanes.rank(*b)))
            else:
                out.append((producer[("F", *b)], False))
        return out

    needs = [[waits(*act) for act in order] for order in orders]
    index: dict[tuple[int, int], int] = {}
    rank: list[int] = []
    deps: list[tuple[tuple[int, bool], ...]] = []
    extras: list[tuple[int, ...]] = []
    recipe: list[int] = []
    gathered: list[set[int]] = [set() for _ in range(pp)]
    nxt = [0] * pp
    parked: dict[tuple[int, int], list[int]] = {}  # a step not placed yet -> ranks whose next step waits on it
    ready = deque(range(pp))
    while ready:  # Kahn's order: each rank runs on until its next step waits on one not placed yet
        p = ready.popleft()
        while nxt[p] < len(orders[p]):
            i = nxt[p]
            missing = next((q for q, _ in needs[p][i] if q not in index), None)
            if missing is not None:
                parked.setdefault(missing, []).append(p)
                break
            index[(p, i)] = len(rank)
            rank.append(p)
            deps.append(tuple((index[q], sent) for q, sent in needs[p][i]))
            r = steps.recipe[p][i]
            new = tuple(c for c in steps.recipes[r][1] if c not in gathered[p])  # its forward chunks
            gathered[p].update(new)
            extras.append(new)
            recipe.append(r)
            ready.extend(parked.pop((p, i), ()))
            nxt[p] += 1
    if len(rank) != sum(len(o) for o in orders):
        raise RuntimeError(f"pipeline deadlock: {len(rank)} of {sum(len(o) for o in orders)} steps can run")
    return _DualGraph(tuple(rank), tuple(deps), tuple(extras), tuple(recipe), steps.recipes)


def _dual_makespan(spec: PipelineSpec) -> float:
    """:func:`_dual`'s makespan, the same float, from the schedule's dependency graph (:func:`_dual_graph`,
    built once per schedule shape): the same sums and maxima in the same order, without the rank programs."""
    _check_dual(spec)
    g = _dual_graph(spec.schedule, spec.pp, spec.n_micro)
    durations = [sum(_piece_seconds(spec, *r)) for r in g.recipes]
    extra = spec.first_f_extra_s
    p2p = spec.p2p_s if spec.p2p_s > 0 else None
    end = [0.0] * len(g.rank)
    now = [0.0] * spec.pp
    for a, p in enumerate(g.rank):
        t = now[p]
        for q, sent in g.deps[a]:
            at = end[q] + p2p if sent and p2p is not None else end[q]
            if at > t:
                t = at
        if extra:
            for c in g.extras[a]:
                if extra[c]:
                    t = t + extra[c]
        t = t + durations[g.recipe[a]]
        end[a] = now[p] = t
    return max(now)


def _dual(spec: PipelineSpec) -> PipelineResult:
    """The DualPipe(V) schedule, every rank's actions recorded (the makespan alone: :func:`_dual_makespan`)."""
    _check_dual(spec)
    lanes = _Lanes(spec)
    deps = _Deps(lanes.n_pos, lanes.rank, spec.p2p_s)
    now = [0.0] * spec.pp
    acts: list[list[tuple[str, int, int, float, float]]] = [[] for _ in range(spec.pp)]
    timeline: dict[Key, tuple[int, float, float]] = {}
    pairs: dict[tuple[int, int], tuple[int, int]] = {}

    def rank_proc(p: int) -> _Program:
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
                        yield _extra(spec, c)
            start = now[p]
            pieces = _pieces(spec, lanes, act)
            yield sum(piece[3] for piece in pieces)
            t = start
            for i, (phase, c, mb, d, keys) in enumerate(pieces):
                end = now[p] if i == len(pieces) - 1 else t + d
                if d > 0 or phase != "W":
                    if phase == "FB":
                        pairs[(p, len(acts[p]))] = (c, keys[1][1])
                    acts[p].append((phase, c, mb, t, end))
                for key in keys:
                    assert key not in timeline, key
                    timeline[key] = (p, t, end)
                t = end
            if f is not None:
                deps.done("F", *f, now[p])
            if b is not None and kind != "W":
                deps.done("B", *b, now[p])

    _run_ranks(deps, now, [rank_proc(p) for p in range(spec.pp)])
    n_fb = sum(1 for key in timeline if key[0] != "W")
    if n_fb != 2 * spec.n_micro * spec.n_stages:
        raise RuntimeError(f"pipeline deadlock: {n_fb} of {2 * spec.n_micro * spec.n_stages} actions ran")
    return PipelineResult(max(a[4] for r in acts for a in r), acts, timeline, pairs)
