"""``moesim study seed --out DIR`` and ``moesim study capacity [--spec FILE] --out DIR``: studies as HTML reports.

- ``seed``: the DeepSeek-V3 B200 seed runs reproduced (``DIR/seed-report.html``).
- ``capacity``: a sweep (the built-in default, or ``--spec FILE``): ``DIR/results.csv`` appended point by
  point (a killed sweep resumes where it stopped), then ``DIR/capacity-report.html``. Every core by
  default (``--workers``); ``--executor ray`` runs the points on a Ray cluster (the ``ray`` extra;
  ``RAY_ADDRESS`` selects a running cluster, else a local one is started). Ctrl-C or SIGTERM records every
  finished point, stops the workers and exits 130 / 143 saying how to resume; one sweep at a time per
  ``--out`` (a second exits 2 naming the first's PID).

Bad input (unknown keys, impossible ranges, a GPU count no plan fits) exits 2 with one message.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from moesim.argtypes import non_empty, worker_count
from sim.errors import MoesimError

__all__ = ["add_study", "run_capacity", "run_seed"]



def add_study(subparsers: Any) -> None:
    """Register ``moesim study seed|capacity`` on ``subparsers``."""
    study = subparsers.add_parser("study", help="studies as self-contained HTML reports (seed, capacity)",
                                  description=__doc__.splitlines()[0])
    sub = study.add_subparsers(dest="study", required=True, metavar="STUDY")
    seed = sub.add_parser("seed", help="the DeepSeek-V3 B200 seed runs, predicted vs measured")
    seed.add_argument("--out", type=non_empty, required=True, help="output folder (created)")
    seed.add_argument("--json", action="store_true", help="also print the rows as JSON")
    seed.set_defaults(handler=run_seed)
    cap = sub.add_parser("capacity", help="sweep models, GPUs, counts, fabrics; best plan per point")
    cap.add_argument("--spec", help="capacity spec TOML (default: the built-in sweep, 500+ points)")
    cap.add_argument("--out", type=non_empty, required=True, help="output folder (created; an existing results.csv is resumed)")
    cap.add_argument("--workers", type=worker_count, help="processes (default: every core)")
    cap.add_argument("--executor", choices=("process", "ray"), default="process")
    cap.add_argument("--no-report", action="store_true", help="only the results table")
    cap.set_defaults(handler=run_capacity)


def run_seed(args: argparse.Namespace) -> int:
    from studies.seed import write_seed_report

    try:
        path, rows = write_seed_report(args.out)
    except (MoesimError, OSError) as err:
        print(f"moesim study seed: error: {err}", file=sys.stderr)
        return 2
    for r in rows:
        meas = f"{r.measured:.0f}" if r.measured else "-"
        print(f"{r.group:<44} {r.variant:<30} predicted {r.prediction.tokens_per_s_per_gpu:9.1f}  measured {meas:>6}")
    if args.json:
        print(json.dumps([{"group": r.group, "variant": r.variant, "fitted": r.fitted, "measured": r.measured,
                           "interval": r.interval, "prediction": r.prediction.to_dict()} for r in rows], indent=2, allow_nan=False))
    print(f"report: {path}")
    return 0


class _Progress:
    """A rich progress bar on a terminal; a line per ~5% of the points otherwise."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.task: Any = None
        self.last = -1
        self.t0 = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        if sys.stderr.isatty():
            if self.bar is None:
                from rich.progress import Progress

                self.bar = Progress(transient=False)
                self.bar.start()
                self.task = self.bar.add_task("capacity sweep", total=total)
            self.bar.update(self.task, completed=done)
            return
        step = max(1, total // 20)
        if done // step != self.last or done == total:
            self.last = done // step
            print(f"capacity: {done}/{total} points, {time.perf_counter() - self.t0:.0f} s", file=sys.stderr,
                  flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def run_capacity(args: argparse.Namespace) -> int:
    from studies.capacity import SweepInterrupted, read_results, run_sweep
    from studies.capacity_report import write_capacity_report
    from studies.capacity_spec import default_spec, load_spec
    from studies.report import check_report_path

    progress = _Progress()
    t0 = time.perf_counter()
    try:
        spec = load_spec(args.spec) if args.spec else default_spec()
        if not args.no_report:
            check_report_path(Path(args.out) / "capacity-report.html")
        table = run_sweep(spec, args.out, workers=args.workers, executor=args.executor, progress=progress)
        progress.close()
        rows = read_results(table)
        report = None
        if not args.no_report:
            from studies._sim import INTERVAL_NOTE, STACK_NOTE

            report = write_capacity_report(rows, table.parent / "capacity-report.html",
                                           f"{spec.source}: {len(rows)} points. {STACK_NOTE}. "
                                           f"{INTERVAL_NOTE}.")
    except SweepInterrupted as stop:  # SIGINT / SIGTERM: finished points are in the table, workers are gone
        progress.close()
        print(f"moesim study capacity: interrupted ({stop}): {stop.recorded} of {stop.total} points recorded in "
              f"{stop.table}; run the same command again to resume", file=sys.stderr)
        return 128 + stop.signum
    except (MoesimError, OSError) as err:
        progress.close()
        print(f"moesim study capacity: error: {err}", file=sys.stderr)
        return 2
    ok = sum(1 for r in rows if r["status"] == "ok")
    print(f"{len(rows)} points ({ok} with a plan that fits) in {time.perf_counter() - t0:.1f} s: {table}")
    if report:
        print(f"report: {report}")
    return 0
