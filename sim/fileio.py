"""Atomic file output: write to a temporary file in the destination folder, then rename over the target.

A reader (or a crash, or a full disk) never sees a half-written file: either the old file (or none) or
the whole new one. Use it for every file moesim writes (traces, reports, profiles, calibrations, tables).

Every file moesim *reads* goes through :func:`read_input` (JSON/TOML specs, calibrations, configs) or
:func:`read_trace` (traces, gzip inflated in chunks): a regular file only (``/dev/zero``, a FIFO or a
folder is refused before a byte is read, and a FIFO never blocks), read no further than a size limit
of :mod:`sim.limits` that the error states together with the variable that raises it.

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
import signal
import stat
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from sim.errors import ConfigError
from sim.limits import MAX_INPUT_MB, MAX_TRACE_MB, MB, env_limit

__all__ = ["write_atomic", "append_line_durably", "read_input", "read_trace", "open_regular", "CHUNK_BYTES"]

CHUNK_BYTES = 1 << 20
"""Bytes read (or inflated) per step: memory beyond the limit is never allocated."""


def open_regular(path: str | os.PathLike[str], what: str = "input file") -> BinaryIO:
    """Open ``path`` for reading if it is a regular file (after symlinks); else a :class:`ConfigError`
    naming the path and what it is. A FIFO is opened non-blocking, so checking it never waits for a writer.

    >>> open_regular("/dev/zero")
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: /dev/zero: a character device, not a regular file; expected an input file
    """
    given = os.fspath(path)
    try:
        fd = os.open(given, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ConfigError(f"{given}: no such file") from None
    except OSError as err:
        raise ConfigError(f"{given}: cannot read: {err.strerror or err}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{given}: {_kind(mode)}, not a regular file; expected {_article(what)}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def _article(what: str) -> str:
    return f"an {what}" if what[:1].lower() in "aeiou" else f"a {what}"


def _too_big(given: str, what: str, limit_mb: int, variable: str, measure: str = "") -> ConfigError:
    return ConfigError(f"{given}: {what} larger than the {limit_mb} MB limit{measure}; {variable}=<MB> raises it")


def read_input(path: str | os.PathLike[str], what: str = "JSON/TOML input") -> bytes:
    """The bytes of a regular file of at most ``MAX_INPUT_MB`` megabytes (``MOESIM_MAX_INPUT_MB``).

    >>> read_input("/no/such.toml")
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: /no/such.toml: no such file
    """
    limit_mb = env_limit("MOESIM_MAX_INPUT_MB", MAX_INPUT_MB)
    given = os.fspath(path)
    with open_regular(given, what) as handle:
        data = _read_upto(handle, given, limit_mb * MB)
    if len(data) > limit_mb * MB:
        raise _too_big(given, what, limit_mb, "MOESIM_MAX_INPUT_MB")
    return data


def read_trace(path: str | os.PathLike[str]) -> bytes:
    """The JSON bytes of a trace file, gzip (by suffix or magic) inflated in chunks: at most
    ``MAX_TRACE_MB`` decompressed megabytes (``MOESIM_MAX_TRACE_MB``), so a small gzip bomb stops at the
    bound instead of filling memory. A truncated or corrupt gzip is a :class:`ConfigError`."""
    limit_mb = env_limit("MOESIM_MAX_TRACE_MB", MAX_TRACE_MB)
    limit = limit_mb * MB
    given = os.fspath(path)
    with open_regular(given, "trace file") as handle:
        head = _read_upto(handle, given, 1)
        head += _read_upto(handle, given, 1)
        if given.endswith(".gz") or head == b"\x1f\x8b":
            data = _inflate(handle, head, given, limit, limit_mb)
        else:
            data = head + _read_upto(handle, given, limit - len(head))
    if len(data) > limit:
        raise _too_big(given, "trace", limit_mb, "MOESIM_MAX_TRACE_MB", " on decompressed size")
    return data


def _read_upto(handle: BinaryIO, given: str, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``handle`` (one more than allowed tells the caller it is too big)."""
    out: list[bytes] = []
    size = 0
    try:
        while size <= limit:
            chunk = handle.read(min(CHUNK_BYTES, limit + 1 - size))
            if not chunk:
                break
            out.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise ConfigError(f"{given}: cannot read: {err.strerror or err}") from None
    return b"".join(out)


def _inflate(handle: BinaryIO, head: bytes, given: str, limit: int, limit_mb: int) -> bytes:
    """Inflate a (possibly multi-member) gzip stream, never holding more than ``limit + 1`` output bytes."""
    out: list[bytes] = []  # pieces, joined once at the end: no doubling reallocation near the limit
    size = 0
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = head
    started = False
    try:
        while True:
            if not pending:
                pending = _read_upto(handle, given, CHUNK_BYTES - 1)
                if not pending:
                    break
            started = True
            piece = inflater.decompress(pending, limit + 1 - size)
            out.append(piece)
            size += len(piece)
            if size > limit:
                raise _too_big(given, "trace", limit_mb, "MOESIM_MAX_TRACE_MB", " on decompressed size")
            pending = inflater.unconsumed_tail
            if inflater.eof:
                rest = inflater.unused_data + pending
                while not rest.strip(b"\x00"):  # the end, or trailing zero padding (as gzip allows)
                    rest = _read_upto(handle, given, CHUNK_BYTES - 1)
                    if not rest:
                        return b"".join(out)
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # another member follows
                pending = rest
    except zlib.error as err:
        raise ConfigError(f"{given}: truncated or corrupt gzip: {err}") from None
    if not started or not inflater.eof:
        raise ConfigError(f"{given}: truncated or corrupt gzip: the stream ends before its end marker")
    return b"".join(out)


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
    try:
        _write_replace(folder, target, payload)
    except OSError as err:  # name the user's path, never the temporary file's
        if err.errno is None:
            raise
        raise type(err)(err.errno, err.strerror or os.strerror(err.errno), os.fspath(path)) from err


def _write_replace(folder: Path, target: Path, payload: bytes) -> None:
    """Write ``payload`` to a temporary file in ``folder``, fsync it and rename it over ``target``."""
    with _fatal_signals_held():  # the temporary file never outlives a SIGTERM (SIGINT: the except below)
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


_HELD_SIGNALS = (signal.SIGTERM, signal.SIGHUP) if hasattr(signal, "pthread_sigmask") else ()


@contextlib.contextmanager
def _fatal_signals_held() -> Iterator[None]:
    """Hold SIGTERM and SIGHUP inside the block, deliver them after it.

    Their default action ends the process without running ``except`` or ``finally``, which would leave
    the temporary file behind; held, a signal lands after the rename (or the cleanup), so the process
    ends with the old file or the whole new one and no ``.tmp``. A Python handler (one that raises) runs
    right after the block. SIGINT is not held: it raises ``KeyboardInterrupt``, which removes the file.
    """
    if not _HELD_SIGNALS:
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


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
