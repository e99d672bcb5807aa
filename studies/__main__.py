"""``python -m studies validate [SCENARIO ...] [--json] [--tolerance X]``: predicted vs measured runs.

Exits 0 when every held-out variant is within the tolerance, 1 when one is not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from sim.errors import MoesimError
from studies.validate import DEFAULT_TOLERANCE, format_rows, validate_scenarios


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    validate = sub.add_parser("validate", help="predict every measured run and compare")
    validate.add_argument("scenarios", nargs="*", help="built-in scenario names or TOML paths (default: all built in)")
    validate.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="relative error bound (0.10)")
    validate.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 0 < args.tolerance < 10:
        print(f"studies: error: --tolerance must be in (0, 10), got {args.tolerance}", file=sys.stderr)
        return 2
    try:
        rows = validate_scenarios(args.scenarios or None, args.tolerance)
    except MoesimError as err:
        print(f"studies: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"rows": [r.as_dict() for r in rows]}, indent=2))
    else:
        print(format_rows(rows))
    return 0 if all(r.within for r in rows if not r.fitted) else 1


if __name__ == "__main__":
    sys.exit(main())
