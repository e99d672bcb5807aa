"""Do the fitted mechanisms carry to runs no fit reads? Each ablation refits the joint calibration (in sample, with
one parameter held) and predicts the held-out files with it (studies/data/heldout_models.toml,
studies/data/heldout_runs.toml). Nothing is written; a mechanism that helps the dataset but hurts the held-out runs
is one to question.

    python benchmarks/heldout_ablation.py                      # the shipped fit and three mechanisms off
    python benchmarks/heldout_ablation.py '{"step.fixed_s": 0}' # one ablation of your own (JSON of held values)

Each row takes a joint fit (about two minutes on two cores).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The rows run without arguments: the shipped fit, then each held value refitted around.
DEFAULT_ABLATIONS: tuple[dict[str, float], ...] = (
    {}, {"grouped.half_rows_per_expert_launch": 85.25}, {"chip.nvl72_rate": 1.0}, {"step.fixed_s": 0.0})


def row(fixed: dict[str, float]) -> dict[str, object]:
    """The in-sample error of the refit holding ``fixed`` and its held-out errors by file and model."""
    import numpy as np

    from sim.joint import shipped_values
    from sim.predict import predict
    from sim.stacks import profile_for
    from studies._sim import stack_profile
    from studies.dataset import load_runs, resolve_run
    from studies.heldout import HELDOUT_MODELS, HELDOUT_RUNS
    from studies.joint_fit import _measured, fit_joint, load_cases, predict_cases

    cases = load_cases()
    values = fit_joint(cases, start={**shipped_values(), **fixed}, fixed=fixed).values if fixed else shipped_values()
    in_sample = float(np.mean(np.abs(predict_cases(cases, values) / _measured(cases) - 1)))
    out: dict[str, object] = {"held": fixed, "in_sample_mape": round(in_sample, 4)}
    for path in (HELDOUT_MODELS, HELDOUT_RUNS):
        errors: dict[str, list[float]] = {}
        for run in load_runs(path):
            model, cluster, plan = resolve_run(run)
            pred = predict(model, cluster, plan, None, stack=stack_profile(profile_for(run.stack, run.release)),
                           params=values)
            key = run.model if path == HELDOUT_MODELS else "table rows"
            errors.setdefault(key, []).append(pred.tokens_per_s_per_gpu / run.measured_tokens_per_s_per_gpu - 1)
        for key, errs in errors.items():
            out[key] = {"mape": round(statistics.fmean(abs(e) for e in errs), 4),
                        "signed": round(statistics.fmean(errs), 4), "runs": len(errs)}
    return out


def main(argv: list[str]) -> int:
    ablations = [json.loads(a) for a in argv] if argv else list(DEFAULT_ABLATIONS)
    for fixed in ablations:
        print(json.dumps(row(fixed)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
