"""Run a child command in its own process group and pass SIGINT, SIGTERM and SIGHUP on to that group.

``moesim reference`` starts ``python -m reference.run``, which may start one process per rank; a signal to
``moesim`` alone would leave them running. :func:`run_group` forwards the signal to the whole group (the
child and everything it started), waits for the child, then kills whatever of the group is left, and
returns the shell's exit code (``128 + signal`` when a signal stopped it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from types import FrameType

__all__ = ["FORWARDED", "run_group"]

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_group(command: Sequence[str]) -> int:
    """Run ``command`` as the leader of a new process group; see the module docstring."""
    proc = subprocess.Popen(list(command), process_group=0)
    received: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signum)

    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, forward) for s in FORWARDED} if main else {}
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if received:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # a rank that outlived its launcher
        return 128 + received[0]
    return code if code >= 0 else 128 - code
