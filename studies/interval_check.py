"""How honest the intervals are on the runs no fit saw: coverage of every held-out run's p10-p90 interval, by file
and by distance from the evidence, and the widening each reason for lying beyond the envelope needs.

Every run of the held-out files (``studies/data/heldout_runs.toml``, ``heldout_models.toml``, ``scale_checks.toml``,
``efa_runs.toml``, ``mlperf_gpt_oss.toml``) is predicted with the shipped calibration and given its interval exactly as ``moesim predict``
gives one (:func:`sim.uncertainty.prediction_interval`). For the runs beyond the envelope the check also reports,
per reason (a model no run measured, a scale past 2x the largest measured, a backend or precision never measured
on its class, a fabric transport never measured), the multiplier of the leave-one-group-out half-width at which
80% of them would fall inside: :data:`sim.uncertainty.BEYOND_FACTOR` is sized on the "model" row (the largest
held-out family, GPT-OSS-120B and Kimi-K2), :data:`sim.uncertainty.TRANSPORT_FACTOR` on the "transport" row (the
AWS EFA matrix, the only such runs). ``docs/transfer.md`` carries the tables (``python -m studies.transfer
--write``); ``python -m studies.interval_check`` prints them.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from sim.uncertainty import (
    DISTANCES,
    held_out_predictions,
    placement,
    prediction_interval,
)

__all__ = ["HELD_OUT_FILES", "KIND_ORDER", "HeldOutInterval", "held_out_intervals", "interval_markdown", "main", "needed_factors", "pooled_factor",
           "reason_kind", "smallest_factor", "group_factor", "leave_one_file_out", "by_file_out_of_sample",
           "out_of_sample_markdown"]

#: The held-out files, by what they hold.
HELD_OUT_FILES = {"heldout_runs.toml": "Megatron-Bridge table rows no fit saw",
                  "heldout_recent.toml": "Megatron-Bridge's newest containers (26.06-26.08) no fit saw",
                  "heldout_early.toml": "Megatron-Bridge's 25.11 container no fit saw",
                  "heldout_models.toml": "models no fit saw (GPT-OSS-120B, Kimi-K2)",
                  "scale_checks.toml": "MLPerf scale points no fit saw",
                  "heldout_torchtitan.toml": "TorchTitan short steps no fit saw (DeepSeek-V3 16B)",
                  "efa_runs.toml": "AWS EFA backend matrix (a transport no fit saw)",
                  "mlperf_gpt_oss.toml": "MLPerf GPT-OSS-20B recipe cells no fit saw"}
#: What each reason for lying beyond the envelope is called in the tables, by the start of its text
#: (:func:`sim.uncertainty.classify`).
_REASON_KINDS = (("model ", "model"), ("fabric transport", "transport"), ("EP backend", "backend or precision"),
                 ("precision", "backend or precision"), ("launch mode", "launch mode"), ("EP schedule", "EP schedule"))
#: A run beyond the envelope for several reasons counts under the first of them in this order (the farthest
#: extrapolation first): an EFA run of a backend never measured is a transport case.
KIND_ORDER = ("transport", "backend or precision", "launch mode", "EP schedule", "model", "scale")


def reason_kind(reason: str) -> str:
    """The kind of one reason :func:`sim.uncertainty.classify` gives for a plan beyond the envelope.

    >>> reason_kind("model gpt-oss-120b was never measured (measured: deepseek-v3-671b)")
    'model'
    >>> reason_kind("8192 GPUs is beyond 2x the largest count measured on gb200-nvl72 (2048)")
    'scale'
    """
    for prefix, kind in _REASON_KINDS:
        if reason.startswith(prefix):
            return kind
    return "scale"


@dataclass(frozen=True)
class HeldOutInterval:
    """One held-out run: its file, measured and predicted tokens/s per GPU, interval and why it lies where it does.

    ``need``: the multiplier of its distance's spread that would just reach the measured value: beyond the envelope
    the leave-one-group-out half-width's, in a measured group the in-sample one's (NaN for a new group)."""

    file: str
    run_id: str
    measured: float
    predicted: float
    p10: float
    p90: float
    distance: str
    kinds: tuple[str, ...]
    need: float

    @property
    def covered(self) -> bool:
        return self.p10 <= self.measured <= self.p90


def smallest_factor(contains_at: Callable[[float], bool], hi: float = 100.0) -> float:
    """The smallest multiplier of the leave-one-group-out half-width at which the interval ``contains_at(w)``
    builds holds the measured value (bisection: the interval only grows with ``w``); inf past ``hi``."""
    if not contains_at(hi):
        return math.inf
    lo = 0.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if contains_at(mid) else (mid, hi)
    return hi


def held_out_intervals(data_dir: Path | None = None) -> list[HeldOutInterval]:
    """Every predictable held-out run with its interval (the shipped calibration and interval data)."""
    from sim.interval_data import load_shipped

    base = data_dir or Path(str(resources.files("studies").joinpath("data")))
    shipped = load_shipped()
    if shipped is None:
        return []
    out = []
    for name in HELD_OUT_FILES:
        predictions, _skipped = held_out_predictions(base / name)
        for run, pred in predictions:
            iv = prediction_interval(pred, cluster=run.cluster, data=shipped)
            if iv is None:
                continue
            beyond = iv.distance == DISTANCES[2]
            need = math.nan
            if beyond or iv.distance == DISTANCES[0]:
                def contains_at(w: float, pred: Any = pred, run: Any = run) -> bool:
                    at = prediction_interval(pred, cluster=run.cluster, data=shipped, widen=w)
                    return at is not None and at.contains(run.measured_tokens_per_s_per_gpu)
                need = smallest_factor(contains_at)
            kinds = _first_kind(placement(pred, shipped, run.cluster).reasons) if beyond else ()
            out.append(HeldOutInterval(name, run.id, run.measured_tokens_per_s_per_gpu, pred.tokens_per_s_per_gpu,
                                       iv.p10, iv.p90, iv.distance, kinds, need))
    return out


def _first_kind(reasons: Sequence[str]) -> tuple[str, ...]:
    kinds = {reason_kind(r) for r in reasons}
    return tuple(k for k in KIND_ORDER if k in kinds)[:1]


def needed_factors(rows: Sequence[HeldOutInterval], quantile: float = 0.8) -> dict[str, tuple[int, float]]:
    """Per reason kind (a run with several reasons counts under the first in :data:`KIND_ORDER`): (runs, the
    ``quantile`` of their needed multiplier)."""
    by: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        for kind in r.kinds:
            by[kind].append(r.need)
    return {k: (len(v), float(np.quantile(v, quantile))) for k, v in sorted(by.items())}


def group_factor(rows: Sequence[HeldOutInterval], quantile: float = 0.8) -> tuple[int, float]:
    """(runs, the ``quantile`` of the needed multiplier) over the runs in a measured group: what
    :data:`sim.uncertainty.GROUP_FACTOR` is sized on."""
    needs = [r.need for r in rows if r.distance == DISTANCES[0]]
    return len(needs), float(np.quantile(needs, quantile)) if needs else math.nan


def pooled_factor(rows: Sequence[HeldOutInterval], quantile: float = 0.8) -> tuple[int, float]:
    """(runs, the ``quantile`` of the needed multiplier) over the runs beyond the envelope for any reason but an
    unmeasured transport: what :data:`sim.uncertainty.BEYOND_FACTOR` is sized on."""
    needs = [r.need for r in rows if r.kinds and r.kinds[0] != "transport"]
    return len(needs), float(np.quantile(needs, quantile)) if needs else math.nan


Row = TypeVar("Row", bound="HasFile")


class HasFile(Protocol):
    """A held-out row: it names its file."""

    @property
    def file(self) -> str: ...


def by_file_out_of_sample(rows: Sequence[Row], size: Callable[[Sequence[Row]], tuple[float, float]],
                          inside: Callable[[Row, float, float], bool]) -> list[tuple[str, float, float, int, int]]:
    """For each file of ``rows``: the (beyond, group) factors ``size`` gives on the other files' rows, and how many of
    this file's rows ``inside`` puts inside at them. Rows of (file, beyond factor, group factor, inside, rows)."""
    out = []
    for name in sorted({r.file for r in rows}):
        beyond, group = size([r for r in rows if r.file != name])
        mine = [r for r in rows if r.file == name]
        out.append((name, beyond, group, sum(inside(r, beyond, group) for r in mine), len(mine)))
    return out


def out_of_sample_markdown(lofo: Sequence[tuple[str, float, float, int, int]], intro: str, unit: str) -> list[str]:
    """:func:`by_file_out_of_sample`'s rows as a table and a total, for ``docs/transfer.md``."""
    inside, n = sum(r[3] for r in lofo), sum(r[4] for r in lofo)
    return [intro, "", "| held-out file | beyond factor without it | group factor without it | inside |",
            "|---|---:|---:|---:|",
            *(f"| {name} | {beyond:.2f} | {group:.2f} | {k} of {m} |" for name, beyond, group, k, m in lofo),
            "", f"Leave-one-file-out: **{inside} of {n} {unit} ({100 * inside / max(1, n):.0f}%)**.", ""]


def leave_one_file_out(rows: Sequence[HeldOutInterval], quantile: float = 0.8) -> list[tuple[str, float, float, int, int]]:
    """The factors' sizing checked out of sample: for each held-out file but the EFA matrix (its transport factor has
    no other file to be sized on), ``GROUP_FACTOR`` and ``BEYOND_FACTOR`` sized as :func:`group_factor` and
    :func:`pooled_factor` on the other files' runs, and how many of this file's runs they put inside. Rows of
    (file, beyond factor, group factor, inside, runs)."""
    def inside(r: HeldOutInterval, beyond: float, group: float) -> bool:
        if r.distance == DISTANCES[1]:  # a new group's width has no factor sized here
            return r.covered
        return r.need <= (beyond if r.kinds else group)

    usable = [r for r in rows if r.file != "efa_runs.toml" and not (r.kinds and r.kinds[0] == "transport")]
    return by_file_out_of_sample(usable, lambda others: (pooled_factor(others, quantile)[1],
                                                         group_factor(others, quantile)[1]), inside)


def interval_markdown(rows: Sequence[HeldOutInterval] | None = None) -> list[str]:
    """The section of ``docs/transfer.md``."""
    from sim.uncertainty import BEYOND_FACTOR, GROUP_FACTOR, TRANSPORT_FACTOR

    rows = held_out_intervals() if rows is None else list(rows)
    lines = ["## Intervals on the held-out runs (`python -m studies.interval_check`)", "",
             "Each held-out run's p10-p90 interval as `moesim predict` gives it (nominal coverage 80%), by file and by "
             "its distance from the evidence.", "",
             "| held-out file | distance | runs | inside | median p90/p10 |", "|---|---|---:|---:|---:|"]
    cells: dict[tuple[str, str], list[HeldOutInterval]] = defaultdict(list)
    for r in rows:
        cells[(r.file, r.distance)].append(r)
    for (name, distance), group in sorted(cells.items(), key=lambda kv: (list(HELD_OUT_FILES).index(kv[0][0]),
                                                                         DISTANCES.index(kv[0][1]))):
        width = float(np.median([g.p90 / g.p10 for g in group]))
        lines.append(f"| {name} ({HELD_OUT_FILES[name]}) | {distance} | {len(group)} | "
                     f"{sum(g.covered for g in group)} | {width:.2f} |")
    inside = sum(r.covered for r in rows)
    no_efa = [r for r in rows if r.file != "efa_runs.toml"]
    lines += ["", f"All: **{inside} of {len(rows)} inside** ({100 * inside / max(1, len(rows)):.0f}%); without the "
              f"EFA matrix {sum(r.covered for r in no_efa)} of {len(no_efa)} "
              f"({100 * sum(r.covered for r in no_efa) / max(1, len(no_efa)):.0f}%).", "",
              "Beyond the envelope, the multiplier of the leave-one-group-out half-width at which 80% of the runs of "
              f"each reason would be inside (a run with several reasons counts under the first of {', '.join(KIND_ORDER)}); "
              "in a measured group, the multiplier of its in-sample half-width:",
              "",
              "| reason | runs | multiplier at 80% |", "|---|---:|---:|"]
    for kind, (n, q) in needed_factors(rows).items():
        lines.append(f"| {kind} | {n} | {q:.2f} |")
    n_other, q_other = pooled_factor(rows)
    lines.append(f"| every reason but transport | {n_other} | {q_other:.2f} |")
    n_group, q_group = group_factor(rows)
    lines.append(f"| a measured group (its in-sample spread) | {n_group} | {q_group:.2f} |")
    lines += ["", f"Shipped: `BEYOND_FACTOR` = {BEYOND_FACTOR:g} (sized on the pooled row: the models, backends, "
              f"precisions, launch modes, EP schedules and scales no fit saw, pooled), `TRANSPORT_FACTOR` = {TRANSPORT_FACTOR:g} (the \"transport\" "
              f"row: what the AWS EFA runs show; no other unmeasured transport checks it), `GROUP_FACTOR` = "
              f"{GROUP_FACTOR:g} (the last row: a measured group's in-sample spread understates a new run's). All are "
              "sized on these "
              "runs, so their coverage here is in-sample for the width (not for the model); "
              "`tests/studies/test_interval_check.py` fails when a refit moves a row 15% from its shipped factor.", ""]
    lines += out_of_sample_markdown(
        leave_one_file_out(rows), "Their sizing checked out of sample: each held-out file's runs with `GROUP_FACTOR` "
        "and `BEYOND_FACTOR` sized on the other files alone (the EFA matrix aside: no other file sizes a transport):",
        "inside")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.interval_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", action="store_true", help="also list every run")
    args = parser.parse_args(argv)
    rows = held_out_intervals()
    print("\n".join(interval_markdown(rows)))
    if args.runs:
        for r in rows:
            print(f"{r.file:20s} {r.run_id:58s} {r.distance:20s} p10 {r.p10:9.0f} predicted {r.predicted:9.0f} "
                  f"p90 {r.p90:9.0f} measured {r.measured:9.0f} {'inside' if r.covered else 'OUT'} "
                  f"{','.join(r.kinds)} {'' if math.isnan(r.need) else f'need x{r.need:.2f}'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
