"""Worker processes that stop when told: interrupts keep finished work and leave no process behind.

:class:`WorkerPool` runs a picklable function over items in ``workers`` processes, one item at a time
per process, each result sent back over that worker's own pipe. Unlike ``concurrent.futures``, a result
is either in the parent or still in a worker's pipe, never in a helper thread, so after an interrupt the
parent can take every finished result (:meth:`WorkerPool.ready`) and then end the workers
(:meth:`WorkerPool.terminate`, also on leaving the ``with`` block). Workers ignore SIGINT (the parent
decides), die with the parent (Linux ``PR_SET_PDEATHSIG``, so not even ``kill -9`` of the parent leaves
them running) and take the default action on SIGTERM.

:func:`interrupt_signals` turns SIGINT and SIGTERM into :class:`Interrupted` (a ``KeyboardInterrupt``
with the signal number), deferred while the code is inside :func:`critical` (an append that must
finish whole).

>>> with WorkerPool(abs, workers=2) as pool:
...     pool.submit("a", -3)
...     pool.submit("b", 4)
...     got = sorted(r for _, r in pool.collect() + pool.collect(timeout_s=5))
>>> got
[3, 4]
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from types import FrameType
from typing import Any, Self

__all__ = ["Interrupted", "WorkerDied", "WorkerPool", "critical", "interrupt_signals"]

_PR_SET_PDEATHSIG = 1
_TERM_GRACE_S = 2.0


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised in the main thread; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class WorkerDied(RuntimeError):
    """A worker process ended without sending its result (killed by the OOM killer, a crash)."""


_pending: list[int] = []
_depth = [0]


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    if _depth[0] > 0:
        _pending.append(signum)
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def interrupt_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` in the main thread inside this block (the previous
    handlers come back after it). Off the main thread it does nothing (Python runs handlers there only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _pending.clear()


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """Defer :func:`interrupt_signals`' interrupts to the end of this block (then the first one is raised)."""
    _depth[0] += 1
    try:
        yield
    finally:
        _depth[0] -= 1
        if _depth[0] == 0 and _pending:
            signum = _pending[0]
            _pending.clear()
            raise Interrupted(signum)


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _worker_main(fn: Callable[[Any], Any], conn: Connection, parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent(parent)
    while True:
        try:
            item = conn.recv()
        except EOFError:
            return
        try:
            message: tuple[str, Any] = ("ok", fn(item))
        except Exception as err:  # noqa: BLE001 -- the parent re-raises it
            message = ("err", err)
        try:
            conn.send(message)
        except Exception as err:  # noqa: BLE001 -- an unpicklable result or exception
            conn.send(("err", RuntimeError(f"{type(err).__name__}: {err}")))


class WorkerPool:
    """``workers`` processes running ``fn``; see the module docstring. Use it as a context manager."""

    def __init__(self, fn: Callable[[Any], Any], workers: int) -> None:
        if workers < 1:
            raise ValueError(f"WorkerPool: workers must be at least 1, got {workers}")
        self._fn = fn
        self._size = workers
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._busy: dict[int, Any] = {}  # worker index -> key of the item it runs

    def __enter__(self) -> Self:
        ctx = multiprocessing.get_context()
        parent = os.getpid()
        for _ in range(self._size):
            mine, theirs = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=_worker_main, args=(self._fn, theirs, parent), daemon=True)
            proc.start()
            theirs.close()
            self._procs.append(proc)
            self._conns.append(mine)
        return self

    def __exit__(self, *exc: object) -> None:
        self.terminate()

    @property
    def pids(self) -> list[int]:
        """The workers' process ids (tests check they are gone)."""
        return [p.pid for p in self._procs if p.pid is not None]

    @property
    def idle(self) -> int:
        return len(self._conns) - len(self._busy)

    @property
    def busy(self) -> int:
        return len(self._busy)

    def submit(self, key: Any, item: Any) -> None:
        """Send ``item`` to an idle worker; ``key`` comes back with its result."""
        index = next(i for i in range(len(self._conns)) if i not in self._busy)
        self._conns[index].send(item)
        self._busy[index] = key

    def collect(self, timeout_s: float | None = None) -> list[tuple[Any, Any]]:
        """Wait for at least one result (or ``timeout_s``); return every result already sent, as
        ``(key, result)``. A worker's exception is raised here; a worker that died raises :class:`WorkerDied`."""
        if not self._busy:
            return []
        wait([self._conns[i] for i in self._busy], timeout_s)
        return self.ready()

    def ready(self, *, errors: bool = True) -> list[tuple[Any, Any]]:
        """The results already sent, without waiting (``errors=False``: skip failed items silently)."""
        out: list[tuple[Any, Any]] = []
        failure: BaseException | None = None
        for index in list(self._busy):
            conn = self._conns[index]
            try:
                if not conn.poll(0):
                    continue
                status, value = conn.recv()
            except (EOFError, OSError):
                key = self._busy.pop(index)
                failure = failure or WorkerDied(f"worker process {self._procs[index].pid} ended (exit code "
                                                f"{self._procs[index].exitcode}) while running {key}")
                continue
            key = self._busy.pop(index)
            if status == "ok":
                out.append((key, value))
            else:
                failure = failure or value
        if failure is not None and errors:
            raise failure
        return out

    def terminate(self) -> None:
        """End every worker (SIGTERM, then SIGKILL after a grace period) and reap it."""
        for conn in self._conns:
            conn.close()
        for proc in self._procs:
            if proc.is_alive():
                with contextlib.suppress(OSError):
                    proc.terminate()
        for proc in self._procs:
            proc.join(_TERM_GRACE_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self._conns, self._busy = [], {}
