"""What if: the runs of a measured-runs file predicted with joint parameters, built-in stack profile fields and plan
fields changed, against what was measured, without refitting anything. A trial of one idea at a glance, before
``python -m studies.joint_fit --fix / --stack`` refits under it:

    python -m studies.what_if --fix release.torchtitan=1 --run titan-dsv3            # TorchTitan at kernel rates
    python -m studies.what_if studies/data/heldout_torchtitan.toml --plan compile_model=false
    python -m studies.what_if --stack torchtitan.indexed_accumulate=true --run titan --breakdown

``--fix NAME=VALUE``: a joint parameter (or a trial switch of the fit's) in place of the shipped fit's, as the fit's
own ``--fix`` takes it (:mod:`sim.joint`); ``--stack
NAME.FIELD=VALUE``: a built-in profile's field, read as shipped otherwise (so the joint parameters still apply to
it, as in the fit's trials); ``--plan FIELD=VALUE``: a :class:`sim.specs.ParallelPlan` field of every selected run;
``--run TEXT``: only the runs whose id contains it (repeatable). Each run's measured speedup over its ``baseline``
run, where both are selected, is printed beside the predicted one; ``--json`` prints the rows for scripts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from sim.errors import ConfigError, MoesimError
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.stacks import builtin_overrides, profile_for
from studies.dataset import MeasuredRun, load_runs, resolve_run
from studies.joint_fit import stack_trial, trial_structure, typed_value

__all__ = ["WhatIf", "plan_changes_from", "what_if", "what_if_json", "what_if_markdown", "main"]


@dataclass(frozen=True)
class WhatIf:
    """One run under the changes: measured and predicted tokens/s per GPU, the predicted step and its breakdown."""

    id: str
    measured: float
    predicted: float
    step_s: float
    breakdown: Mapping[str, float]
    baseline: str | None = None

    @property
    def error(self) -> float:
        """Predicted over measured, less one."""
        return self.predicted / self.measured - 1


def plan_changes_from(items: Sequence[str]) -> dict[str, Any]:
    """The ``--plan FIELD=VALUE`` options as plan field changes, each of its field's type (that of the default plan's
    value, :func:`studies.joint_fit.typed_value`; a field without a default value of its own, e.g. ``mtp_layers``,
    a whole number, a number or a word); raises :class:`~sim.errors.ConfigError` naming the option and the field.

    >>> plan_changes_from(["compile_model=false", "micro_batch=2", "ep_backend=deepep"])
    {'compile_model': False, 'micro_batch': 2, 'ep_backend': 'deepep'}
    >>> plan_changes_from(["no_such=1"])
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: --plan no_such=1: 'no_such' is no plan field
    """
    defaults = {f.name: f.default for f in fields(ParallelPlan)}
    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"--plan {item!r}: expected FIELD=VALUE (e.g. compile_model=false)")
        if name not in defaults:
            raise ConfigError(f"--plan {item}: {name!r} is no plan field")
        current = defaults[name]
        if current is None:  # no typed default: the text's own type
            current = next((kind() for kind in (int, float) if _parses(kind, text)), "")
        out[name] = typed_value("--plan", item, name, current, text)
    return out


def _parses(kind: type, text: str) -> bool:
    try:
        kind(text)
    except ValueError:
        return False
    return True


@contextlib.contextmanager
def _stacks_changed(changes: Mapping[str, Mapping[str, Any]]) -> Iterator[None]:
    """Within the block, each named built-in profile reads with its field changes."""
    with contextlib.ExitStack() as stack:
        for name, change in changes.items():
            stack.enter_context(builtin_overrides(profiles=(name,), **change))
        yield


def _selected(runs: Sequence[MeasuredRun], select: Sequence[str]) -> list[MeasuredRun]:
    chosen = [r for r in runs if not select or any(s in r.id for s in select)]
    if not chosen:
        raise ConfigError(f"--run {', '.join(select)}: no run id contains it (ids: {', '.join(r.id for r in runs)})")
    return chosen


def what_if(path: str | Path | None = None, *, params: Mapping[str, float] | None = None,
            stacks: Mapping[str, Mapping[str, Any]] | None = None, plan: Mapping[str, Any] | None = None,
            select: Sequence[str] = ()) -> list[WhatIf]:
    """Every run of the file at ``path`` (default: the shipped dataset) whose id contains one of ``select`` (all
    when empty), predicted with the joint parameters ``params`` over the shipped fit, the built-in profiles' field
    changes ``stacks`` (profile -> field -> value) and the plan field changes ``plan``. Raises
    :class:`~sim.errors.ConfigError` for a plan a run cannot take, naming the run."""
    rows = []
    with _stacks_changed(stacks or {}):
        for run in _selected(load_runs(path), select):
            if plan:
                run = replace(run, plan={**run.plan, **plan})
            try:
                model, cluster, run_plan = resolve_run(run)
                pred = predict(model, cluster, run_plan, None, stack=profile_for(run.stack, run.release),
                               name=run.id, params=params or None)
            except MoesimError as err:
                raise ConfigError(f"run {run.id!r}: {err}") from None
            rows.append(WhatIf(run.id, run.measured_tokens_per_s_per_gpu, pred.tokens_per_s_per_gpu,
                               pred.step_time_s, dict(pred.breakdown), run.baseline))
    return rows


def what_if_markdown(rows: Sequence[WhatIf], breakdown: bool = False) -> list[str]:
    """The rows as a markdown table (each run's breakdown under it when ``breakdown``), the mean error, and every
    selected run's speedup over its selected baseline, measured against predicted."""
    lines = ["| run | measured tok/s/GPU | predicted | error | step s |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.id} | {r.measured:.0f} | {r.predicted:.0f} | {r.error:+.1%} | {r.step_s:.2f} |")
        if breakdown:
            parts = ", ".join(f"{k} {v:.3g}" for k, v in sorted(r.breakdown.items(), key=lambda kv: -kv[1])
                              if v >= 1e-3 * r.step_s)
            lines.append(f"| | | | | {parts} |")
    lines += ["", f"mean |error| {statistics.fmean(abs(r.error) for r in rows):.1%} over {len(rows)} run(s)"]
    by_id = {r.id: r for r in rows}
    for r in rows:
        base = by_id.get(r.baseline or "")
        if base is not None:
            lines.append(f"speedup {r.id} over {base.id}: predicted {r.predicted / base.predicted - 1:+.1%}, "
                         f"measured {r.measured / base.measured - 1:+.1%}")
    return lines


def what_if_json(rows: Sequence[WhatIf]) -> dict[str, Any]:
    """The rows as ``{"runs": [...], "mean_abs_error": ...}``: each run's id, measured and predicted tokens/s per GPU,
    error, step seconds and breakdown."""
    return {"runs": [{"id": r.id, "measured": r.measured, "predicted": r.predicted, "error": r.error,
                      "step_s": r.step_s, "breakdown": dict(r.breakdown)} for r in rows],
            "mean_abs_error": statistics.fmean(abs(r.error) for r in rows)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.what_if", description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", nargs="?", help="a measured-runs file (default: the shipped dataset)")
    parser.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                        help="a joint parameter (or a trial switch) in place of the shipped fit's")
    parser.add_argument("--stack", action="append", default=[], metavar="NAME.FIELD=VALUE",
                        help="a built-in stack profile's field")
    parser.add_argument("--plan", action="append", default=[], metavar="FIELD=VALUE",
                        help="a plan field of every selected run")
    parser.add_argument("--run", action="append", default=[], metavar="TEXT", help="only runs whose id contains it")
    parser.add_argument("--breakdown", action="store_true", help="each run's step breakdown (seconds)")
    parser.add_argument("--json", action="store_true", help="print {\"runs\": [...], \"mean_abs_error\": ...}")
    args = parser.parse_args(argv)
    try:
        params, _ = trial_structure(args.fix, [])
        rows = what_if(args.dataset, params=params, stacks=stack_trial(args.stack),
                       plan=plan_changes_from(args.plan), select=args.run)
    except MoesimError as err:
        print(f"error: {err}")
        return 2
    print(json.dumps(what_if_json(rows), indent=1) if args.json else "\n".join(what_if_markdown(rows, args.breakdown)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
