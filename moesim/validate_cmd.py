"""``moesim validate [DATASET] [--json] [--threshold FILE] [--write-intervals [FILE]]``: every measured run
predicted and compared, with the leave-one-out coverage of the p10-p90 intervals.

``--write-intervals`` also writes the residuals that every prediction's interval is built from
(:mod:`sim.interval_data`; default ``sim/data/intervals.json``), so that no prediction re-predicts the dataset.

Exit codes: 0 within the repository's thresholds (``studies/data/validate_threshold.toml``), 1 when an
error exceeds them, 2 on bad input (one message). Thresholds apply to the shipped dataset; a user's own
DATASET is checked against them only with ``--threshold FILE`` (or the shipped file by name).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sim.errors import MoesimError
from studies.layer_cells import layer_cell_rows
from studies.validate import (
    check_thresholds,
    format_logo,
    format_result,
    load_thresholds,
    logo_validation,
    validate_runs,
)

__all__ = ["add_validate", "run_validate"]


def add_validate(subparsers: Any) -> None:
    """Register ``moesim validate`` on ``subparsers``."""
    p = subparsers.add_parser("validate", help="predict every measured run and compare (MAPE, max error)",
                              description=__doc__.splitlines()[0])
    p.add_argument("dataset", nargs="?", help="measured-runs TOML (default: the shipped dataset)")
    p.add_argument("--threshold", help="threshold TOML (default: the repository's, for the shipped dataset)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--write-intervals", nargs="?", const="", default=None, metavar="FILE", dest="write_intervals",
                   help="write the held-out runs' residuals (the prediction intervals' data) to FILE "
                        "(default: the shipped sim/data/intervals.json)")
    p.set_defaults(handler=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    """Run ``moesim validate``; returns the exit code."""
    try:
        result = validate_runs(args.dataset)
        logo = logo_validation(args.dataset)
        cells = layer_cell_rows() if not args.dataset else []
        limits = load_thresholds(args.threshold) if (args.threshold or not args.dataset) else None
        written = None
        if getattr(args, "write_intervals", None) is not None:
            from sim import interval_data

            written = interval_data.write(interval_data.build(args.dataset),
                                          args.write_intervals or interval_data.INTERVALS_FILE)
    except OSError as err:
        print(f"moesim validate: error: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
        return 2
    except MoesimError as err:
        print(f"moesim validate: error: {err}", file=sys.stderr)
        return 2
    failures = check_thresholds(result, limits) if limits else []
    if args.json:
        out = result.as_dict()
        out["thresholds"] = None if limits is None else vars(limits)
        out["threshold_failures"] = failures
        out["logo_mape"], out["logo_max"] = logo["logo_mape"], logo["logo_max"]
        out["logo"] = logo
        out["layer_cells"] = cells
        print(json.dumps(out, indent=2, allow_nan=False))
    else:
        print(format_result(result, failures))
        print(format_logo(logo, cells))
        if written is not None:
            print(f"interval residuals written: {written}")
    return 1 if failures else 0
