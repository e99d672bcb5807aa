"""Leave-one-out coverage of moesim's p10-p90 intervals on the measured runs (issue 8, Must show 5).

    python benchmarks/interval_coverage.py [--calibration NAME_OR_FILE]

Each measured run of studies/data/measured_runs.toml is predicted with moesim's default costs; its
interval is built from the other runs of its stack (sim.uncertainty) plus the calibration's residual
spread; the table shows whether the measurement falls inside. Nominal coverage: 80%.
"""

from __future__ import annotations

import argparse

from sim.calibration import load_calibration
from sim.uncertainty import calibration_sd, loo_coverage, measured_run_pairs
from studies.dataset import MEASURED_RUNS


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--calibration", default=None)
    args = p.parse_args()
    sd = calibration_sd(load_calibration(args.calibration).tables.get("residuals", {})) if args.calibration else 0.0
    pairs, skipped = measured_run_pairs(MEASURED_RUNS)
    cov = loo_coverage(pairs, calibration_sd=sd)
    print(f"{'run':<40} {'stack':<11} {'predicted':>9} {'measured':>9} {'p10':>8} {'p90':>8}  in")
    for r in cov["rows"]:
        print(f"{r['id']:<40} {r['stack']:<11} {r['predicted']:>9.0f} {r['measured']:>9.0f} {r['p10']:>8.0f} "
              f"{r['p90']:>8.0f}  {'yes' if r['covered'] else 'NO'}")
    for s in skipped:
        print(f"not predicted: {s}")
    per = ", ".join(f"{k} {v['covered']}/{v['runs']}" for k, v in cov["per_stack"].items())
    print(f"leave-one-out coverage: {cov['covered']}/{cov['runs']} = {cov['coverage'] * 100:.1f}% "
          f"(nominal 80%; {per}; calibration log-sd {sd:.4f})")


if __name__ == "__main__":
    main()
