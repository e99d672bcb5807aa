"""``python -m calibrate``: ``summarize TRACE`` (per-op times of a profiled run, by shared op name) and
``profile --label DEVICE --out DIR [--smoke]`` (profile the reference over precisions and sizes)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from calibrate.profile import GPU_CASES, SMOKE_CASES, profile_cases
from calibrate.traces import load_trace, op_durations
from sim.errors import MoesimError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m calibrate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    summarize = sub.add_parser("summarize", help="per-op statistics of a Kineto/Chrome trace")
    summarize.add_argument("trace", help="trace .json or .json.gz")
    summarize.add_argument("--json", action="store_true")
    profile = sub.add_parser("profile", help="profile the reference (bf16, mxfp8 at two sizes) into DIR")
    profile.add_argument("--label", required=True, help="device label recorded with the results, e.g. H200")
    profile.add_argument("--out", required=True, help="output folder")
    profile.add_argument("--smoke", action="store_true", help="CPU smoke run: the debug model, tiny shapes")
    profile.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    args = parser.parse_args(argv)
    try:
        if args.command == "profile":
            cases = SMOKE_CASES if args.smoke else GPU_CASES
            path = profile_cases(cases, args.out, args.label, device="cpu" if args.smoke else args.device)
            print(f"calibrate: wrote {path}")
            return 0
        stats = op_durations(load_trace(args.trace))
    except MoesimError as err:
        print(f"calibrate: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({name: {"count": s.count, "total_s": s.total_s, "mean_s": s.mean_s, "source": s.source}
                          for name, s in stats.items()}, indent=2))
        return 0
    print(f"{'op':<28}{'count':>7}{'mean ms':>11}{'total ms':>11}  source")
    for s in stats.values():
        print(f"{s.name:<28}{s.count:>7}{s.mean_s * 1e3:>11.3f}{s.total_s * 1e3:>11.3f}  {s.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
