"""Atomic file output: write to a temporary file in the destination folder, then rename over the target.

A reader (or a crash, or a full disk) never sees a half-written file: either the old file (or none) or
the whole new one. Use it for every file moesim writes (traces, reports, profiles, calibrations, tables).

What a rename may replace is only ever a regular file of the user's (or nothing):

- a symlink is written *through*: the file it points to is replaced, the link stays;
- ``-`` is standard output, and a character device or FIFO (``/dev/stdout``, ``/dev/null``, a named pipe)
  is streamed to directly, never replaced;
- anything else that is not a regular file (a folder, a socket, a block device) and a regular file owned
  by another user are refused with :class:`~sim.errors.ConfigError` naming the path.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_atomic(d / "x.json", '{"a": 1}')
>>> (d / "x.json").read_text()
'{"a": 1}'
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from pathlib import Path

from sim.errors import ConfigError

__all__ = ["write_atomic", "append_line_durably"]


def write_atomic(path: str | os.PathLike[str], data: str | bytes, encoding: str = "utf-8") -> None:
    """Write ``data`` to ``path`` atomically (same-folder temporary file, fsync, rename).

    Raises ``OSError`` (disk full, read-only folder, missing folder) with the target untouched, and
    :class:`~sim.errors.ConfigError` for a path that is neither a regular file of the user's, nor absent,
    nor a stream (see the module docstring).
    """
    payload = data.encode(encoding) if isinstance(data, str) else data
    if os.fspath(path) == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(payload) if hasattr(sys.stdout, "buffer") else sys.stdout.write(payload.decode(encoding))
        sys.stdout.flush()
        return
    try:
        st: os.stat_result | None = os.stat(path)  # follows symlinks (and /proc's fd links)
    except FileNotFoundError:
        st = None
    if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        _stream(Path(path), payload, os.fspath(path))
        return
    target = Path(os.path.realpath(path))  # through every symlink: the link itself is never replaced
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{os.fspath(path)}: not a regular file, a character device or a FIFO; refusing to "
                          "write there")
    if st is not None and hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise ConfigError(f"{os.fspath(path)}: owned by another user (uid {st.st_uid}); refusing to replace it")
    folder = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the file the mode open() would
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _stream(target: Path, payload: bytes, given: str) -> None:
    """Write ``payload`` straight to a character device or FIFO (no temporary, no rename)."""
    try:
        with open(target, "wb", buffering=0) as handle:
            view = memoryview(payload)
            while view:
                view = view[handle.write(view) or 0:]
    except OSError as err:
        raise OSError(err.errno, err.strerror, given) from None


def append_line_durably(path: str | os.PathLike[str], line: str, encoding: str = "utf-8") -> None:
    """Append one complete line (``line`` must not contain a newline) and fsync: for results tables that
    grow as work finishes. A crash can lose the line being written but never leaves half a line behind
    a later one: readers drop a final line that lacks its newline."""
    if "\n" in line:
        raise ValueError("append_line_durably: line must not contain a newline")
    with open(path, "a", encoding=encoding) as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())
