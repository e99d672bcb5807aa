"""argparse ``type=`` callables with bounds: every numeric flag is checked where it is read.

A bad value makes argparse print ``usage`` plus one ``error: argument --tp: ...`` line and exit with
code 2, before any arithmetic. Bounds default to the spec tables of :mod:`sim.limits`.

>>> positive_int(maximum=8)("4")
4
>>> finite_float(minimum=0.0, exclusive_minimum=True)("nan")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a finite number, got 'nan'
>>> plan_int("tp")("0")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: must be at least 1, got 0
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from sim.errors import ConfigError
from sim.limits import (
    CLUSTER_BOUNDS,
    MAX_TRACE_MICROBATCHES,
    PLAN_BOUNDS,
    check_workers,
    env_limit,
)

__all__ = ["bounded_int", "positive_int", "finite_float", "plan_int", "gpu_count", "int_list", "worker_count",
           "trace_microbatches", "non_empty"]


def bounded_int(minimum: int, maximum: int) -> Callable[[str], int]:
    """An integer in ``[minimum, maximum]`` (decimal digits only: no ``1e3``, no ``0x10``)."""

    def parse(text: str) -> int:
        stripped = text.strip()
        if not stripped.lstrip("+-").isdigit() or not stripped.isascii():
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
        if len(stripped) > 30:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {text[:30]!r}...")
        value = int(stripped)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {value}")
        return value

    parse.__name__ = "integer"  # argparse names the type in some messages
    return parse


def positive_int(maximum: int = 1 << 30) -> Callable[[str], int]:
    """An integer in ``[1, maximum]``."""
    return bounded_int(1, maximum)


def finite_float(minimum: float = -math.inf, maximum: float = math.inf, *,
                 exclusive_minimum: bool = False) -> Callable[[str], float]:
    """A finite float in the range (``nan``, ``inf`` and non-numbers are rejected)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if value < minimum or (exclusive_minimum and value == minimum):
            raise argparse.ArgumentTypeError(
                f"must be {'above' if exclusive_minimum else 'at least'} {minimum:g}, got {value:g}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:g}, got {value:g}")
        return value

    parse.__name__ = "number"
    return parse


def plan_int(field: str) -> Callable[[str], int]:
    """The argparse type of a ParallelPlan integer field, bounded as in :data:`sim.limits.PLAN_BOUNDS`."""
    low, high = PLAN_BOUNDS[field]
    return bounded_int(int(low), int(high))


def gpu_count() -> Callable[[str], int]:
    """A GPU count, bounded as the cluster's ``n_gpus``."""
    low, high = CLUSTER_BOUNDS["n_gpus"]
    return bounded_int(int(low), int(high))


def worker_count(text: str) -> int:
    """A ``--workers`` value: an integer in ``1..``:func:`sim.limits.max_workers` (``-1``, ``1e20`` and
    more processes than this machine can use are refused, naming the limit).

    >>> worker_count("2")
    2
    >>> worker_count("1e20")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected an integer, got '1e20'
    """
    value = bounded_int(-(1 << 62), 1 << 62)(text)
    try:
        return check_workers("--workers", value)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--workers ")) from None


worker_count.__name__ = "integer"


def trace_microbatches(text: str) -> tuple[int, ...]:
    """``--trace-microbatches``: comma-separated microbatch indices, at most
    :data:`sim.limits.MAX_TRACE_MICROBATCHES` distinct ones (``MOESIM_MAX_TRACE_MICROBATCHES`` raises it).

    >>> trace_microbatches("0,3,3")
    (0, 3, 3)
    """
    values = int_list(0, 1 << 20)(text)
    try:
        limit = env_limit("MOESIM_MAX_TRACE_MICROBATCHES", MAX_TRACE_MICROBATCHES)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if len(set(values)) > limit:
        raise argparse.ArgumentTypeError(f"at most {limit} microbatches expand to ops in a trace, got "
                                         f"{len(set(values))} (MOESIM_MAX_TRACE_MICROBATCHES=<N> raises it)")
    return values


def int_list(minimum: int, maximum: int) -> Callable[[str], tuple[int, ...]]:
    """A comma-separated list of integers in ``[minimum, maximum]`` (``"0,39,40"``).

    >>> int_list(0, 100)("0, 39,40")
    (0, 39, 40)
    >>> int_list(0, 100)("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be at least 0, got -1
    """
    one = bounded_int(minimum, maximum)

    def parse(text: str) -> tuple[int, ...]:
        items = [t for t in text.split(",")]
        if not text.strip() or any(not t.strip() for t in items):
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
        return tuple(one(t) for t in items)

    return parse


def non_empty(text: str) -> str:
    """A name or a path that is not empty: ``--out ''`` would write into the working folder, ``--cluster ''``
    would fall back to the default as if the option were not given.

    >>> non_empty("b200")
    'b200'
    >>> non_empty(" ")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a name or a path, got an empty value ' '
    """
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a name or a path, got an empty value {text!r}")
    return text


non_empty.__name__ = "value"
