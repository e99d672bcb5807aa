"""One writer per output folder: a lock file holding the writer's PID, created with ``O_EXCL``.

:func:`folder_lock` creates ``FOLDER/.moesim.lock`` (``O_CREAT | O_EXCL``) with this process's PID and
removes it on leaving. A lock whose PID is no longer running (the writer was killed) is stale and is
taken over; a live one raises :class:`~sim.errors.ConfigError` naming the folder and the PID, so two
sweeps on one ``--out`` never write the same points twice. Take-overs are serialised by ``flock`` on the
folder, so two processes that find one stale lock never both take it.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> with folder_lock(d):
...     (d / LOCK_NAME).read_text().split()[0] == str(os.getpid())
True
>>> (d / LOCK_NAME).exists()
False
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from sim.errors import ConfigError

__all__ = ["LOCK_NAME", "folder_lock", "lock_holder"]

LOCK_NAME = ".moesim.lock"
_YOUNG_S = 10.0  # a lock file still without its PID is being written by a starting process


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def lock_holder(folder: str | Path) -> int | None:
    """The PID of the live process holding ``folder``'s lock, or None (no lock, or a stale one)."""
    path = Path(folder) / LOCK_NAME
    try:
        text = path.read_text(encoding="ascii", errors="replace")
        age_s = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None
    fields = text.split()
    if not fields or not fields[0].isdigit():
        return -1 if age_s < _YOUNG_S else None  # a PID still being written, or garbage
    pid = int(fields[0])
    return pid if pid != os.getpid() and _alive(pid) else None


def _create(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
    finally:
        os.close(fd)
    return True


@contextlib.contextmanager
def folder_lock(folder: str | Path, what: str = "--out") -> Iterator[Path]:
    """Hold ``folder``'s lock inside the block (see the module docstring); yields the lock file's path."""
    folder = Path(folder)
    path = folder / LOCK_NAME
    for _ in range(5):
        if _create(path):
            break
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(dir_fd, fcntl.LOCK_EX)
            holder = lock_holder(folder)
            if holder is not None:
                who = f"process {holder}" if holder > 0 else "a process that is starting"
                raise ConfigError(f"{what} {folder}: in use by {who} (lock file {path}); wait for it to finish, "
                                  "or delete the lock file if that process is not a moesim sweep")
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # stale: its writer is gone
        finally:
            os.close(dir_fd)  # releases the flock
    else:
        raise ConfigError(f"{what} {folder}: could not take the lock file {path}")
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            if path.read_text(encoding="ascii").split()[:1] == [str(os.getpid())]:
                path.unlink()
