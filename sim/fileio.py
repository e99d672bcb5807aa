"""Atomic file output: write to a temporary file in the destination folder, then rename over the target.

A reader (or a crash, or a full disk) never sees a half-written file: either the old file (or none) or
the whole new one. Use it for every file moesim writes (traces, reports, profiles, calibrations, tables).

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_atomic(d / "x.json", '{"a": 1}')
>>> (d / "x.json").read_text()
'{"a": 1}'
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic", "append_line_durably"]


def write_atomic(path: str | os.PathLike[str], data: str | bytes, encoding: str = "utf-8") -> None:
    """Write ``data`` to ``path`` atomically (same-folder temporary file, fsync, rename).

    Raises ``OSError`` (disk full, read-only folder, missing folder) with the target untouched.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    payload = data.encode(encoding) if isinstance(data, str) else data
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
