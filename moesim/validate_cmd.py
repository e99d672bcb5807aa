"""``moesim validate [DATASET] [--json] [--threshold FILE|PCT] [--write-intervals [FILE]]``: every measured run
predicted and compared, with the coverage of the p10-p90 intervals (leave-one-out, and leave-one-group-out:
each run's interval built as if its group were unseen; ``logo_interval_coverage``, ``median_p90_p10_ratio``).

``--write-intervals`` also writes the residuals that every prediction's interval is built from
(:mod:`sim.interval_data`; default ``sim/data/intervals.json``), so that no prediction re-predicts the dataset.

Exit codes: 0 within the repository's thresholds (``studies/data/validate_threshold.toml``), 1 when an
error exceeds them, 2 on bad input (one message). Thresholds apply to the shipped dataset; a user's own
DATASET is checked against them only with ``--threshold FILE`` (or the shipped file by name); ``--threshold PCT``
(a number) exits 1 when any run's |error| exceeds PCT percent, each run printed with its interval.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from moesim.argtypes import non_empty
from sim.errors import MoesimError

__all__ = ["add_validate", "run_validate"]


def add_validate(subparsers: Any) -> None:
    """Register ``moesim validate`` on ``subparsers``."""
    p = subparsers.add_parser("validate", help="predict every measured run and compare (MAPE, max error)",
                              description=__doc__.splitlines()[0])
    p.add_argument("dataset", nargs="?", help="measured-runs TOML (default: the shipped dataset)")
    p.add_argument("--threshold", type=non_empty, metavar="FILE|PCT",
                   help="threshold TOML (default: the repository's, for the shipped dataset), or a percentage: "
                        "exit 1 when any run's |error| exceeds it (a user's own runs in CI)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--write-intervals", nargs="?", const="", default=None, metavar="FILE", dest="write_intervals",
                   help="write the held-out runs' residuals (the prediction intervals' data) to FILE "
                        "(default: the shipped sim/data/intervals.json)")
    p.set_defaults(handler=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    """Run ``moesim validate``; returns the exit code."""
    # imported here, not at module level: every other command starts without studies
    from studies.layer_cells import layer_cell_rows
    from studies.validate import (
        check_thresholds,
        error_threshold_failures,
        format_logo,
        format_logo_intervals,
        format_result,
        load_thresholds,
        logo_intervals,
        logo_validation,
        validate_runs,
    )

    try:
        result = validate_runs(args.dataset)
        logo = logo_validation(args.dataset)
        cells = layer_cell_rows() if not args.dataset else []
        pct = _threshold_pct(args.threshold)
        limits = load_thresholds(args.threshold) if pct is None and (args.threshold or not args.dataset) else None
        coverage = logo_intervals(logo)
        written = None
        if getattr(args, "write_intervals", None) is not None:
            from sim import interval_data
            from studies.dataset import MEASURED_RUNS

            written = interval_data.write(interval_data.build(args.dataset or MEASURED_RUNS, logo["runs"], logo["note"]),
                                          args.write_intervals or interval_data.INTERVALS_FILE)
    except OSError as err:
        print(f"moesim validate: error: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
        return 2
    except MoesimError as err:
        print(f"moesim validate: error: {err}", file=sys.stderr)
        return 2
    failures = check_thresholds(result, limits) if limits else []
    if pct is not None:
        failures += error_threshold_failures(result, pct)
    if args.json:
        out = result.as_dict()
        out["thresholds"] = None if limits is None else vars(limits)
        out["threshold_failures"] = failures
        out["logo_mape"], out["logo_max"] = logo["logo_mape"], logo["logo_max"]
        out["lomo_mape"], out["lomo_max"] = logo["lomo_mape"], logo["lomo_max"]
        out["logo"] = logo
        out["logo_interval_coverage"] = coverage["logo_interval_coverage"]
        out["median_p90_p10_ratio"] = coverage["median_p90_p10_ratio"]
        out["logo_intervals"] = coverage
        out["layer_cells"] = cells
        print(json.dumps(out, indent=2, allow_nan=False))
    else:
        print(format_result(result, failures))
        print(format_logo(logo, cells))
        print(format_logo_intervals(coverage))
        if written is not None:
            print(f"interval residuals written: {written}")
    return 1 if failures else 0


def _threshold_pct(value: str | None) -> float | None:
    """``--threshold``'s percentage (``10``, ``12.5%``), or None when it names a threshold TOML file; a
    negative or non-finite percentage is a :class:`ConfigError`."""
    import math

    from sim.errors import ConfigError

    if value is None:
        return None
    try:
        pct = float(value.strip().removesuffix("%"))
    except ValueError:
        return None
    if not (math.isfinite(pct) and pct >= 0):
        raise ConfigError(f"--threshold must be a percentage >= 0 or a threshold TOML file, got {value!r}")
    return pct
