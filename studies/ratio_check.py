"""The ratio intervals of ``moesim compare`` on runs no fit saw: every pair of same-model runs within one held-out
file (the EFA matrix aside: its transport has its own factor), the ratio of their tokens/s per GPU as predicted,
its p10-p90 as ``moesim compare`` builds it (:func:`studies.compare.pair_interval` from the fitted runs' pair
residuals, widened where either run lies beyond the validated envelope, with the step boundary's part,
:func:`sim.uncertainty.ratio_boundary_shift`), and whether the measured ratio falls inside. Beyond the envelope, the widening each pair needs: :data:`studies.compare.RATIO_BEYOND_FACTOR` is sized on
it (the multiplier at which 80% of those pairs fall inside).

``python -m studies.ratio_check`` prints the table of docs/transfer.md's section.
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from studies.compare import (
    RATIO_BEYOND_FACTOR,
    RATIO_GROUP_FACTOR,
    MeasuredPoint,
    measured_points,
    pair_interval,
)
from studies.interval_check import (
    HELD_OUT_FILES,
    by_file_out_of_sample,
    out_of_sample_markdown,
    smallest_factor,
)

__all__ = ["RATIO_FILES", "HeldOutRatio", "held_out_ratios", "leave_one_file_out", "needed_ratio_factor", "ratio_markdown",
           "main"]

#: The held-out files whose same-model pairs are checked (every one but the EFA matrix).
RATIO_FILES = tuple(name for name in HELD_OUT_FILES if name != "efa_runs.toml")


@dataclass(frozen=True)
class HeldOutRatio:
    """One pair of held-out runs of one model: ``a`` over ``b`` predicted and measured, the interval ``moesim
    compare`` gives, whether either run lies beyond the envelope, and the multiplier of the pair spread at which the
    measured ratio would just be inside."""

    file: str
    a: str
    b: str
    predicted: float
    measured: float
    p10: float
    p90: float
    beyond: bool
    need: float

    @property
    def covered(self) -> bool:
        return self.p10 <= self.measured <= self.p90


def held_out_ratios(data_dir: Path | None = None, points: Sequence[MeasuredPoint] | None = None) -> list[HeldOutRatio]:
    """Every same-model pair of predictable runs within each of :data:`RATIO_FILES` (the shipped calibration and
    interval data), with the interval ``moesim compare`` gives its ratio."""
    from sim.interval_data import load_shipped
    from sim.uncertainty import (
        DISTANCES,
        boundary_band,
        held_out_predictions,
        prediction_interval,
        ratio_boundary_shift,
        step_and_boundary,
    )

    base = data_dir or Path(str(resources.files("studies").joinpath("data")))
    shipped = load_shipped()
    band = boundary_band(shipped.runs) if shipped is not None else None
    pts = list(measured_points() if points is None else points)
    out = []
    for name in RATIO_FILES:
        runs = []
        for run, pred in held_out_predictions(base / name)[0]:
            iv = prediction_interval(pred, cluster=run.cluster, data=shipped) if shipped is not None else None
            runs.append((run, pred, iv is not None and iv.distance == DISTANCES[2]))
        for (ra, pa, beyond_a), (rb, pb, beyond_b) in itertools.combinations(runs, 2):
            if pa.model != pb.model:
                continue
            beyond = beyond_a or beyond_b
            ratio = pa.tokens_per_s_per_gpu / pb.tokens_per_s_per_gpu
            measured = ra.measured_tokens_per_s_per_gpu / rb.measured_tokens_per_s_per_gpu
            shift = ratio_boundary_shift(*step_and_boundary(pa), *step_and_boundary(pb), band, beyond)

            def interval_at(w: float, ratio: float = ratio, same_gpu: bool = pa.gpu == pb.gpu,
                            shift: tuple[float, float] = shift, beyond: bool = beyond) -> tuple[float, float]:
                iv = pair_interval(ratio, pts, same_model=True, same_gpu=same_gpu, beyond="beyond" if beyond else "",
                                   widen=w, floor=0.0, group=w, boundary_shift=shift)
                return (iv.p10 or math.nan), (iv.p90 or math.nan)

            p10, p90 = interval_at(RATIO_BEYOND_FACTOR if beyond else RATIO_GROUP_FACTOR)
            if not (math.isfinite(p10) and math.isfinite(p90)):
                continue

            def contains_at(w: float, m: float = measured, at: Callable[[float], tuple[float, float]] = interval_at,
                            ) -> bool:
                low, high = at(w)
                return low <= m <= high
            need = smallest_factor(contains_at)
            out.append(HeldOutRatio(name, ra.id, rb.id, ratio, measured, p10, p90, beyond, need))
    return out


def needed_ratio_factor(rows: Sequence[HeldOutRatio], quantile: float = 0.8, beyond: bool = True) -> tuple[int, float]:
    """(pairs beyond the envelope, or with ``beyond`` False inside it, the ``quantile`` of their needed multiplier):
    what :data:`studies.compare.RATIO_BEYOND_FACTOR` (:data:`studies.compare.RATIO_GROUP_FACTOR`) is sized on."""
    needs = [r.need for r in rows if r.beyond == beyond]
    return len(needs), float(np.quantile(needs, quantile)) if needs else math.nan


def leave_one_file_out(rows: Sequence[HeldOutRatio], quantile: float = 0.8) -> list[tuple[str, float, float, int, int]]:
    """The ratio factors' sizing checked out of sample: for each file, both factors sized on the other files' pairs
    (:func:`needed_ratio_factor`) and how many of this file's pairs they put inside. Rows of (file, beyond factor,
    group factor, inside, pairs)."""
    return by_file_out_of_sample(
        rows, lambda others: (needed_ratio_factor(others, quantile)[1],
                              needed_ratio_factor(others, quantile, beyond=False)[1]),
        lambda r, beyond, group: r.need <= (beyond if r.beyond else group))


def ratio_markdown(rows: Sequence[HeldOutRatio] | None = None) -> list[str]:
    """The section of ``docs/transfer.md``."""
    rows = held_out_ratios() if rows is None else list(rows)
    lines = ["## Ratio intervals on the held-out runs (`python -m studies.ratio_check`)", "",
             "Every pair of held-out runs of one model within one held-out file (the EFA matrix aside), the ratio of "
             "their tokens/s per GPU, and its p10-p90 as `moesim compare` gives it: the fitted runs' pair errors, "
             "widened where either run lies beyond the validated envelope, and the step boundary's band moved through "
             "both steps at once (a short step against a long one moves most; nominal coverage 80%).", "",
             "| held-out file | pairs inside the envelope | inside | pairs beyond it | inside | median p90/p10 |",
             "|---|---:|---:|---:|---:|---:|"]
    for name in RATIO_FILES:
        mine = [r for r in rows if r.file == name]
        if not mine:
            continue
        near, far = [r for r in mine if not r.beyond], [r for r in mine if r.beyond]
        width = float(np.median([r.p90 / r.p10 for r in mine]))
        lines.append(f"| {name} | {len(near)} | {sum(r.covered for r in near)} | {len(far)} | "
                     f"{sum(r.covered for r in far)} | {width:.2f} |")
    near, far = [r for r in rows if not r.beyond], [r for r in rows if r.beyond]
    n_far, factor = needed_ratio_factor(rows)
    n_near, group = needed_ratio_factor(rows, beyond=False)
    lines += ["", f"All: **{sum(r.covered for r in rows)} of {len(rows)} pairs inside** "
              f"({100 * sum(r.covered for r in rows) / max(1, len(rows)):.0f}%): inside the envelope "
              f"{sum(r.covered for r in near)} of {len(near)}, beyond it {sum(r.covered for r in far)} of {len(far)}. "
              f"80% of the pairs are inside at a multiplier of the pair spread of **{factor:.2f}** beyond the envelope "
              f"({n_far} pairs) and **{group:.2f}** inside it ({n_near} pairs); shipped: `RATIO_BEYOND_FACTOR` = "
              f"{RATIO_BEYOND_FACTOR:g}, `RATIO_GROUP_FACTOR` = {RATIO_GROUP_FACTOR:g} (`studies.compare`; "
              "`tests/studies/test_ratio_check.py` fails when either is 15% from what the pairs need).", ""]
    lines += out_of_sample_markdown(leave_one_file_out(rows), "Sized on the other files' pairs alone, each file's "
                                    "pairs:", "pairs inside")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.ratio_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", action="store_true", help="also list every pair")
    args = parser.parse_args(argv)
    rows = held_out_ratios()
    print("\n".join(ratio_markdown(rows)))
    if args.pairs:
        for r in rows:
            print(f"{r.file:20s} {r.a:48s} / {r.b:48s} predicted {r.predicted:7.3f} measured {r.measured:7.3f} "
                  f"p10 {r.p10:7.3f} p90 {r.p90:7.3f} {'inside' if r.covered else 'OUT'}"
                  f" need x{r.need:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
