"""The discrete-event core (SimPy): GPU streams, dependencies, collectives, SM sharing, shared links,
host stalls.

Each simulated rank has named streams (``compute``, ``comm``, ``fsdp_ag``, ...). A :class:`Task` runs on
one stream, in the order tasks were added to that stream, once every task it depends on has finished.
The couplings between concurrent work are simulated, not formulas:

- **SM sharing**: compute tasks (``sms == 0`` on the ``compute`` stream) progress at the rate
  ``(num_sms - held) / num_sms``, where ``held`` is the number of SMs that communication kernels running
  at the same moment on the same rank occupy (DeepEP's ``num_sms``, NCCL's channels). Rates are
  re-evaluated whenever a communication kernel starts or ends (exact, piecewise constant). While
  communication kernels hold every SM (DeepEP's low-latency kernels launch up to one SM per expert),
  compute waits for the next release.
  ``Engine(sm_sharing=False)`` switches the coupling off (for tests and what-ifs).
- **Shared links**: a task with ``link`` set is a flow of ``nbytes`` through that link of the rank
  (``Engine.links[link]`` = capacity in bytes/s; e.g. the rank's NIC). Concurrent flows on one link get
  max-min fair rates, each capped by its own ``max_rate`` (its bottleneck elsewhere); rates are
  re-evaluated whenever a flow on the link starts or ends. Alone a flow takes ``nbytes / min(max_rate,
  capacity)``. A flow's ``duration`` is a fixed latency paid before its bytes move.
- **Collectives**: a task with a ``collective`` key is one member of a collective: it starts when every
  member (on every rank, tasks sharing the key) has arrived. SM-holding members hold their SMs from their
  own arrival (the kernel is launched and spins) to their end.
- **Host stalls**: a ``host_sync`` task stalls its stream for its duration once its dependencies are done,
  and nothing added to the rank after it may start before it ends (the CPU cannot enqueue past a blocking
  copy, so the GPU idles until the CPU has launched work again).
- **Host issue**: where tasks carry ``issue_s`` (the host seconds to launch them), one host per rank issues
  the rank's tasks in the order they were added, ``issue_s`` each, and waits at each ``host_sync`` task until
  it ends. A task (a merged run of kernels) starts no earlier than its first kernel is issued and ends no
  earlier than its last: it starts at least ``issue_s - duration`` after the host reached it. The GPU's wait
  is logged on the rank's ``host`` stream as ``host.issue``.

Exact timelines (all times in seconds):

>>> eng = Engine(num_sms=100)
>>> a = eng.add(0, Task("gemm", "compute", 1.0))
>>> b = eng.add(0, Task("a2a", "comm", 2.0, deps=(a,)))
>>> eng.run()
3.0
>>> eng.timeline(0)
[('gemm', 0.0, 1.0), ('a2a', 1.0, 3.0)]
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import simpy

__all__ = ["HOST_ISSUE", "Task", "Record", "Engine", "max_min_fair"]

#: the name of the records of a GPU stream waiting for the host to issue its next task (on the ``host`` stream)
HOST_ISSUE = "host.issue"

_EPS = 1e-15


@dataclass(frozen=True, slots=True)
class Task:
    """One kernel (or host stall, or link flow) on one stream of one rank.

    ``deps`` are handles returned by :meth:`Engine.add` (any rank). ``sms``: SMs held while running
    (communication kernels). ``collective``: a key shared by all members of one collective. ``link``,
    ``nbytes``, ``max_rate``: a flow through a shared link of the rank (see the module docstring).
    """

    name: str
    stream: str
    duration: float
    deps: tuple[int, ...] = ()
    sms: int = 0
    collective: Hashable | None = None
    host_sync: bool = False
    phase: str = "fwd"
    args: dict[str, Any] | None = None
    link: Hashable | None = None
    nbytes: float = 0.0
    max_rate: float = math.inf
    issue_s: float = 0.0


class Record(NamedTuple):
    rank: Hashable
    name: str
    stream: str
    phase: str
    start: float
    end: float
    handle: int = -1


def max_min_fair(capacity: float, caps: Sequence[float]) -> list[float]:
    """Max-min fair rates of flows with rate ``caps`` sharing one link of ``capacity`` (water filling).

    >>> max_min_fair(10.0, [2.0, 100.0, 100.0])
    [2.0, 4.0, 4.0]
    """
    rates = [0.0] * len(caps)
    left, todo = capacity, sorted(range(len(caps)), key=lambda i: caps[i])
    while todo:
        share = left / len(todo)
        i = todo[0]
        if caps[i] <= share:
            rates[i] = caps[i]
            left -= caps[i]
            todo.pop(0)
        else:
            for j in todo:
                rates[j] = share
            break
    return rates


@dataclass(slots=True)
class _Rank:
    streams: dict[str, list[int]] = field(default_factory=dict)
    held_sms: int = 0
    compute_proc: Any = None
    computing: bool = False
    last_sync: int | None = None
    order: list[int] = field(default_factory=list)


class _Flow:
    __slots__ = ("proc", "cap", "rate")

    def __init__(self, proc: Any, cap: float) -> None:
        self.proc, self.cap, self.rate = proc, cap, 0.0


class _Collective:
    __slots__ = ("expected", "arrived", "event")

    def __init__(self, env: simpy.Environment) -> None:
        self.expected = 0
        self.arrived = 0
        self.event = env.event()


class Engine:
    """A SimPy environment of ranks and streams; add tasks, :meth:`run`, then read :attr:`log`.

    ``links``: capacity (bytes/s) of each shared link, by the key tasks name in ``Task.link``; a link is
    per rank (the rank's NIC), so flows of different ranks never share one.
    """

    def __init__(self, num_sms: int = 132, *, sm_sharing: bool = True,
                 links: dict[Hashable, float] | None = None) -> None:
        if num_sms <= 0:
            raise ValueError(f"num_sms must be positive, got {num_sms}")
        self.num_sms = num_sms
        self.sm_sharing = sm_sharing
        self.links = dict(links or {})
        for key, cap in self.links.items():
            if not cap > 0:
                raise ValueError(f"link {key!r}: capacity must be positive, got {cap}")
        self.env = simpy.Environment(initial_time=0.0)
        self._tasks: list[Task] = []
        self._deps: list[tuple[int, ...]] = []  # the task's deps plus the host sync it was issued after
        self._owner: list[Hashable] = []
        self._done: list[simpy.Event] = []
        self._ranks: dict[Hashable, _Rank] = {}
        self._colls: dict[Hashable, _Collective] = {}
        self._flows: dict[tuple[Hashable, Hashable], list[_Flow]] = {}
        self.log: list[Record] = []
        self._end: dict[int, float] = {}
        self._host_model = False
        self._reached: list[simpy.Event] = []
        self._ready: dict[int, simpy.Event] = {}

    def add(self, rank: Hashable, task: Task) -> int:
        """Queue ``task`` on ``rank``; returns its handle for later ``deps``."""
        handle = len(self._tasks)
        state = self._ranks.setdefault(rank, _Rank())
        deps = task.deps
        if state.last_sync is not None and state.last_sync not in deps:
            deps = deps + (state.last_sync,)
        for d in deps:
            if not 0 <= d < handle:
                raise ValueError(f"task {task.name!r}: unknown dependency handle {d}")
        if task.link is not None:
            if task.link not in self.links:
                raise ValueError(f"task {task.name!r}: unknown link {task.link!r}")
            if task.nbytes < 0 or not task.max_rate > 0:
                raise ValueError(f"task {task.name!r}: a flow needs nbytes >= 0 and max_rate > 0")
        self._tasks.append(task)
        self._deps.append(deps)
        self._owner.append(rank)
        self._done.append(self.env.event())
        state.streams.setdefault(task.stream, []).append(handle)
        state.order.append(handle)
        if task.issue_s < 0:
            raise ValueError(f"task {task.name!r}: issue_s must be >= 0, got {task.issue_s}")
        if task.collective is not None:
            coll = self._colls.get(task.collective)
            if coll is None:
                coll = self._colls[task.collective] = _Collective(self.env)
            coll.expected += 1
        if task.host_sync:
            state.last_sync = handle
        return handle

    def run(self) -> float:
        """Simulate every stream to completion; returns the makespan."""
        self._host_model = any(t.issue_s > 0 for t in self._tasks)
        if self._host_model:
            self._reached = [self.env.event() for _ in self._tasks]
        for rank, state in self._ranks.items():
            if self._host_model:
                self.env.process(self._host(state))
            for stream, handles in state.streams.items():
                proc = self.env.process(self._stream(rank, state, handles))
                if stream == "compute":
                    state.compute_proc = proc
        self.env.run()
        missing = [self._tasks[i].name for i, ev in enumerate(self._done) if not ev.triggered]
        if missing:
            raise RuntimeError(f"deadlock: tasks never ran: {missing[:5]}")
        return max((r.end for r in self.log), default=0.0)

    def timeline(self, rank: Hashable) -> list[tuple[str, float, float]]:
        """``(name, start, end)`` of ``rank``'s tasks in start order (ties: the order they were added)."""
        recs = [r for r in self.log if r.rank == rank]
        recs.sort(key=lambda r: (r.start, r.handle))
        return [(r.name, r.start, r.end) for r in recs]

    def task_args(self) -> list[dict[str, Any] | None]:
        """Each task's ``args``, by handle."""
        return [t.args for t in self._tasks]

    def end_of(self, handle: int) -> float:
        """When the task ``handle`` finished (after :meth:`run`)."""
        return self._end[handle]

    # --- processes ------------------------------------------------------------------------------
    def _host(self, state: _Rank):  # type: ignore[no-untyped-def]
        """The rank's host: issues its tasks in the order they were added and waits at each blocking sync."""
        env = self.env
        for h in state.order:
            task = self._tasks[h]
            lead = task.issue_s - task.duration
            if lead > 0:
                self._ready[h] = env.timeout(lead)
            self._reached[h].succeed()
            if task.issue_s > 0:
                yield env.timeout(task.issue_s)
            if task.host_sync:
                yield self._done[h]

    def _issued(self, rank: Hashable, h: int):  # type: ignore[no-untyped-def]
        """Wait until the host has issued enough of task ``h`` for it to start; log the GPU's wait."""
        env = self.env
        t0 = env.now
        if not self._reached[h].processed:
            yield self._reached[h]
        ready = self._ready.get(h)
        if ready is not None and not ready.processed:
            yield ready
        if env.now > t0:
            task = self._tasks[h]
            self.log.append(Record(rank, HOST_ISSUE, "host", task.phase, t0, env.now, h))

    def _stream(self, rank: Hashable, state: _Rank, handles: Sequence[int]):  # type: ignore[no-untyped-def]
        env = self.env
        for h in handles:
            task = self._tasks[h]
            deps = [self._done[d] for d in self._deps[h] if not self._done[d].processed]
            if len(deps) == 1:
                yield deps[0]
            elif deps:
                yield env.all_of(deps)
            if self._host_model:
                yield from self._issued(rank, h)
            holds = task.sms > 0 and self.sm_sharing
            if holds:
                self._hold(state, task.sms)
            start = env.now
            if task.collective is not None:
                coll = self._colls[task.collective]
                coll.arrived += 1
                if coll.arrived == coll.expected:
                    coll.event.succeed()
                yield coll.event
                start = env.now
            if task.link is not None:
                if task.duration > 0:
                    yield env.timeout(task.duration)
                yield from self._flow(rank, task)
            elif task.stream == "compute" and task.sms == 0 and not task.host_sync:
                remaining = task.duration
                state.computing = True
                while remaining > _EPS:
                    rate = max(0, self.num_sms - state.held_sms) / self.num_sms
                    t0 = env.now
                    try:
                        # Every SM held by communication kernels: compute waits for the next release.
                        yield env.timeout(remaining / rate) if rate > 0 else env.event()
                        remaining = 0.0
                    except simpy.Interrupt:
                        remaining -= (env.now - t0) * rate
                state.computing = False
            elif task.duration > 0:
                yield env.timeout(task.duration)
            if holds:
                self._hold(state, -task.sms)
            self.log.append(Record(rank, task.name, task.stream, task.phase, start, env.now, h))
            self._end[h] = env.now
            self._done[h].succeed()

    def _flow(self, rank: Hashable, task: Task):  # type: ignore[no-untyped-def]
        env = self.env
        key = (rank, task.link)
        flows = self._flows.setdefault(key, [])
        me = _Flow(env.active_process, task.max_rate)
        flows.append(me)
        self._rebalance(key, skip=me)
        remaining = task.nbytes
        while remaining > _EPS * max(1.0, task.nbytes):
            t0, rate = env.now, me.rate
            try:
                yield env.timeout(remaining / rate)
                remaining = 0.0
            except simpy.Interrupt:
                remaining -= (env.now - t0) * rate
        flows.remove(me)
        self._rebalance(key, skip=None)

    def _rebalance(self, key: tuple[Hashable, Hashable], skip: _Flow | None) -> None:
        """New max-min fair rates on one link; interrupt the flows in progress so they re-plan."""
        flows = self._flows[key]
        rates = max_min_fair(self.links[key[1]], [f.cap for f in flows])
        for f, r in zip(flows, rates, strict=True):
            changed = abs(f.rate - r) > 1e-12 * max(r, 1.0)
            f.rate = r
            if changed and f is not skip and f.proc is not None and f.proc.is_alive:
                f.proc.interrupt()

    def _hold(self, state: _Rank, sms: int) -> None:
        state.held_sms += sms
        if state.computing and state.compute_proc is not None and state.compute_proc.is_alive:
            state.compute_proc.interrupt()
