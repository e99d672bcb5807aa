"""Random valid plans through ``moesim predict``: 0 crashes and 0 ``PYTHONHASHSEED`` differences.

    python benchmarks/random_plans.py [--plans 1000] [--seed 0] [--hash-seeds 1 2] [--timeout-s 60]

Draws ``--plans`` command lines (``tests/robustness/plan_space.py``, seeded), and runs all of them in-process
in one worker per hash seed (the workers run side by side). Per plan it records the exit code, a digest of
stdout and the first stderr line. It fails (exit 1) on any crash (exit other than 0/2, a traceback, an
internal error, more than one stderr line on exit 2), any plan slower than ``--timeout-s`` (a hang), or any
plan whose exit code or output bytes differ between hash seeds. Prints one summary line.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang


def _worker(plans: int, seed: int, timeout_s: int) -> None:
    """Run every plan in this process; one JSON line per plan on stdout."""
    from moesim.cli import main
    from tests.robustness.plan_space import random_argv

    rng = random.Random(seed)
    signal.signal(signal.SIGALRM, _alarm)
    real_stdout = sys.stdout
    for i in range(plans):
        argv = ["predict", *random_argv(rng)]
        out, err = io.StringIO(), io.StringIO()
        t0 = time.perf_counter()
        signal.alarm(timeout_s)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code: Any = main(argv)
                except SystemExit as exc:
                    code = exc.code
        except _Hang:
            code = "hang"
        except BaseException as exc:  # noqa: BLE001 - a crash is what this benchmark counts
            code, err = "raised", io.StringIO(f"{type(exc).__name__}: {exc}")
        finally:
            signal.alarm(0)
        row = {"i": i, "argv": argv, "code": code, "s": round(time.perf_counter() - t0, 3),
               "out": hashlib.sha256(out.getvalue().encode()).hexdigest(), "err": err.getvalue()}
        real_stdout.write(json.dumps(row) + "\n")
        real_stdout.flush()


def _crash(row: dict[str, Any]) -> bool:
    err = row["err"]
    if row["code"] not in (0, 2) or "Traceback" in err or "internal error" in err:
        return True
    return row["code"] == 2 and len(err.strip().splitlines()) != 1


def main() -> int:
    """Parse arguments, run the workers, compare, print the summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hash-seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--timeout-s", type=int, default=60)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args.plans, args.seed, args.timeout_s)
        return 0
    t0 = time.perf_counter()
    procs = []
    for hs in args.hash_seeds:
        env = {**os.environ, "PYTHONHASHSEED": str(hs), "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, __file__, "--worker", "--plans", str(args.plans), "--seed", str(args.seed),
               "--timeout-s", str(args.timeout_s)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    runs = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            print(f"worker exited {p.returncode}", file=sys.stderr)
            return 1
        runs.append([json.loads(line) for line in out.splitlines()])
    first = runs[0]
    crashes = [r for run in runs for r in run if _crash(r)]
    hangs = [r for run in runs for r in run if r["code"] == "hang"]
    differ = [a for a, *others in zip(*runs, strict=True)
              if any((a["code"], a["out"], a["err"]) != (b["code"], b["out"], b["err"]) for b in others)]
    codes = Counter(r["code"] for r in first)
    slowest = max(first, key=lambda r: r["s"])
    print(f"{args.plans} plans (seed {args.seed}) x hash seeds {args.hash_seeds}: predicted {codes.get(0, 0)}, "
          f"refused with exit 2 {codes.get(2, 0)}, crashes {len(crashes)}, hangs {len(hangs)}, "
          f"hash-seed differences {len(differ)}; slowest plan {slowest['s']} s; "
          f"{time.perf_counter() - t0:.0f} s wall")
    for r in (crashes + differ)[:10]:
        print("  " + " ".join(r["argv"]) + f"  -> {r['code']}: {r['err'].strip()[-200:]}")
    return 1 if crashes or hangs or differ else 0


if __name__ == "__main__":
    sys.exit(main())
