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

``--comm FIELD=VALUE``: a scalar :class:`sim.comm.CommCosts` field (a sourced transport or kernel constant, e.g.
``efa_a2a_fraction`` or ``proxy_normal_s``) over the costs each run predicts with, as a calibration file's ``comm``
table overrides it.

``--grid NAME=V1,V2,...`` (repeatable) scans joint parameters (or ``comm.FIELD``) instead of setting them: one row per point of the
options' product (at most :data:`MAX_GRID_POINTS`), each selected run's error and each selected pair's speedup at it,
so where a group of runs sits on two parameters is one command:

    python -m studies.what_if --run titan-dsv3 --fix release.spares_benchmarked=1 --fix release.torchtitan=0.37 \
        --grid host.sync_s=1e-4,8e-4 --grid nccl.a2a_net_fraction=0.6,0.75,0.9
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from sim.calibration import default_inputs
from sim.comm import CommCosts
from sim.errors import ConfigError, MoesimError
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.stacks import builtin_overrides, load_stack, profile_for
from studies.dataset import MeasuredRun, load_runs, resolve_run
from studies.joint_fit import (
    TRIAL_SWITCHES,
    stack_trial,
    trial_structure,
    trial_value,
    typed_value,
)

__all__ = ["WhatIf", "Speedup", "GridPoint", "MAX_GRID_POINTS", "COMM_PREFIX", "plan_changes_from", "comm_value",
           "comm_changes_from", "grid_points", "what_if",
           "what_if_grid", "speedups", "shared_prefix", "what_if_json", "what_if_markdown", "grid_json", "grid_markdown", "main"]

#: The most points ``--grid`` may take: each point predicts every selected run once, so this bounds the command's time.
MAX_GRID_POINTS = 64
#: A ``--grid`` name with this prefix scans a :class:`sim.comm.CommCosts` field (as ``--comm`` sets one).
COMM_PREFIX = "comm."


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


@dataclass(frozen=True)
class Speedup:
    """A selected run over its selected baseline run: the predicted and the measured ratio of their tokens/s."""

    run: str
    baseline: str
    predicted: float
    measured: float


@dataclass(frozen=True)
class GridPoint:
    """One point of a ``--grid`` scan: the joint values it holds and every selected run predicted under them."""

    values: Mapping[str, float]
    rows: Sequence[WhatIf]


def speedups(rows: Sequence[WhatIf]) -> list[Speedup]:
    """Every run among ``rows`` whose ``baseline`` is among them too: its speedup over it, predicted and measured."""
    by_id = {r.id: r for r in rows}
    out = []
    for r in rows:
        base = by_id.get(r.baseline or "")
        if base is not None:
            out.append(Speedup(r.id, base.id, r.predicted / base.predicted, r.measured / base.measured))
    return out


def comm_value(option: str, item: str) -> tuple[str, float]:
    """One ``FIELD=VALUE`` for a scalar :class:`sim.comm.CommCosts` field, in the range the field takes
    (:meth:`~sim.comm.CommCosts.scalar_problem`); raises :class:`~sim.errors.ConfigError` naming ``option`` and what it takes.

    >>> comm_value("--comm", "efa_a2a_fraction=0.5")
    ('efa_a2a_fraction', 0.5)
    >>> comm_value("--comm", "deepep_sms=24")
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: --comm deepep_sms=24: 'deepep_sms' is a table of CommCosts (one value per SM count), not a scalar field
    """
    name, sep, text = item.partition("=")
    if not sep or not name:
        raise ConfigError(f"{option} {item!r}: expected FIELD=VALUE (e.g. efa_a2a_fraction=0.5)")
    if name not in CommCosts.__dataclass_fields__:
        raise ConfigError(f"{option} {item}: {name!r} is no CommCosts field (sim/comm/costs.py lists them)")
    if name not in CommCosts.scalar_fields():
        raise ConfigError(f"{option} {item}: {name!r} is a table of CommCosts (one value per SM count), not a scalar "
                          f"field")
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{option} {item}: value {text!r} is not a number") from None
    if problem := CommCosts.scalar_problem(name, value):
        raise ConfigError(f"{option} {item}: {problem}")
    return name, value


def comm_changes_from(items: Sequence[str]) -> dict[str, float]:
    """The ``--comm FIELD=VALUE`` options as CommCosts overrides (:func:`comm_value` checks each).

    >>> comm_changes_from(["proxy_normal_s=1e-3", "efa_a2a_call_s=6e-4"])
    {'proxy_normal_s': 0.001, 'efa_a2a_call_s': 0.0006}
    """
    return dict(comm_value("--comm", item) for item in items)


def _axis_value(name: str, text: str) -> tuple[str, float]:
    """One value of a ``--grid`` axis: a CommCosts field under :data:`COMM_PREFIX`, else a joint parameter."""
    if name.startswith(COMM_PREFIX):
        field, value = comm_value("--grid", f"{name[len(COMM_PREFIX):]}={text}")
        return COMM_PREFIX + field, value
    return trial_value("--grid", f"{name}={text}", TRIAL_SWITCHES)


def grid_points(items: Sequence[str], fix: Sequence[str] = ()) -> list[dict[str, float]]:
    """The ``--grid NAME=V1,V2,...`` options as the points of their product (the first option varies slowest), each
    the values it holds. Every value is checked as ``--fix`` checks it (a joint parameter or trial switch, a finite
    number inside the parameter's bounds), or under ``comm.`` as ``--comm`` does (:func:`comm_value`); ``fix`` holds
    joint parameters and ``comm.FIELD`` the ``--comm`` fields; raises :class:`~sim.errors.ConfigError` naming the option for a
    parameter given twice or also held by ``fix``, an empty value, or more than :data:`MAX_GRID_POINTS` points.

    >>> grid_points(["host.sync_s=1e-4,8e-4", "nccl.a2a_net_fraction=0.9"])
    [{'host.sync_s': 0.0001, 'nccl.a2a_net_fraction': 0.9}, {'host.sync_s': 0.0008, 'nccl.a2a_net_fraction': 0.9}]
    >>> grid_points(["host.sync_s=1e-4"], fix=["host.sync_s=2e-4"])
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: --grid host.sync_s=1e-4: 'host.sync_s' is also held by --fix or --comm
    """
    held = {item.partition("=")[0] for item in fix}
    axes: list[list[tuple[str, float]]] = []
    names: list[str] = []
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"--grid {item!r}: expected NAME=V1,V2,... (e.g. host.sync_s=1e-4,8e-4)")
        if name in names:
            raise ConfigError(f"--grid {item}: {name!r} is given twice")
        if name in held:
            raise ConfigError(f"--grid {item}: {name!r} is also held by --fix or --comm")
        values = [v.strip() for v in text.split(",")]
        if not all(values):
            raise ConfigError(f"--grid {item}: an empty value (expected NAME=V1,V2,...)")
        names.append(name)
        axes.append([_axis_value(name, v) for v in values])
    count = math.prod(len(axis) for axis in axes)
    if count > MAX_GRID_POINTS:
        sizes = " x ".join(str(len(axis)) for axis in axes)
        raise ConfigError(f"--grid: {count} points ({sizes}); at most {MAX_GRID_POINTS}, each predicts every selected run")
    return [dict(point) for point in itertools.product(*axes)]


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
            comm: Mapping[str, float] | None = None, select: Sequence[str] = ()) -> list[WhatIf]:
    """Every run of the file at ``path`` (default: the shipped dataset) whose id contains one of ``select`` (all
    when empty), predicted with the joint parameters ``params`` over the shipped fit, the built-in profiles' field
    changes ``stacks`` (profile -> field -> value), the plan field changes ``plan`` and the CommCosts fields
    ``comm`` over the costs each run predicts with (:func:`sim.calibration.default_inputs`). Raises
    :class:`~sim.errors.ConfigError` for a plan a run cannot take, naming the run."""
    rows = []
    with _stacks_changed(stacks or {}):
        for run in _selected(load_runs(path), select):
            if plan:
                run = replace(run, plan={**run.plan, **plan})
            try:
                model, cluster, run_plan = resolve_run(run)
                stack = load_stack(profile_for(run.stack, run.release))
                costs = None
                if comm:
                    costs, stack = default_inputs(cluster.gpu, stack)
                    costs = replace(costs, comm={**costs.comm, **comm})
                pred = predict(model, cluster, run_plan, costs, stack=stack, name=run.id, params=params or None)
            except MoesimError as err:
                raise ConfigError(f"run {run.id!r}: {err}") from None
            rows.append(WhatIf(run.id, run.measured_tokens_per_s_per_gpu, pred.tokens_per_s_per_gpu,
                               pred.step_time_s, dict(pred.breakdown), run.baseline))
    return rows


def what_if_grid(points: Sequence[Mapping[str, float]], path: str | Path | None = None, *,
                 params: Mapping[str, float] | None = None, stacks: Mapping[str, Mapping[str, Any]] | None = None,
                 plan: Mapping[str, Any] | None = None, comm: Mapping[str, float] | None = None,
                 select: Sequence[str] = ()) -> list[GridPoint]:
    """:func:`what_if` at each of ``points`` (joint values over ``params``, ``comm.FIELD`` values over ``comm``), the
    other changes the same at every one."""
    out = []
    for point in points:
        joint = {k: v for k, v in point.items() if not k.startswith(COMM_PREFIX)}
        fields = {k[len(COMM_PREFIX):]: v for k, v in point.items() if k.startswith(COMM_PREFIX)}
        out.append(GridPoint(dict(point), what_if(path, params={**(params or {}), **joint}, stacks=stacks, plan=plan,
                                                  comm={**(comm or {}), **fields}, select=select)))
    return out


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
    lines += [f"speedup {s.run} over {s.baseline}: predicted {s.predicted - 1:+.1%}, measured {s.measured - 1:+.1%}"
              for s in speedups(rows)]
    return lines


def shared_prefix(ids: Sequence[str]) -> str:
    """The leading ``-``-separated words every one of several run ids shares (``""`` for fewer than two ids or none
    shared), so a table can name each run by the rest.

    >>> shared_prefix(["titan-dsv3-b200-bf16", "titan-dsv3-h100-bf16"]), shared_prefix(["a-b", "c-d"])
    ('titan-dsv3-', '')
    """
    if len(ids) < 2:
        return ""
    common = os.path.commonprefix(list(ids))
    return common[:common.rfind("-") + 1]


def grid_markdown(points: Sequence[GridPoint]) -> list[str]:
    """A ``--grid`` scan as one markdown table: a row per point (its values, each run's error, their mean |error|,
    each selected pair's predicted speedup), the measured speedups in the header; run ids lose the words they all
    share (named above the table)."""
    names = list(points[0].values)
    runs = [r.id for r in points[0].rows]
    cut = len(prefix := shared_prefix(runs))
    pairs = speedups(points[0].rows)
    head = names + [f"{run[cut:]} error" for run in runs] + ["mean abs error"]
    head += [f"{s.run[cut:]} over {s.baseline[cut:]} (measured {s.measured - 1:+.1%})" for s in pairs]
    lines = [f"runs: {prefix}*", ""] if prefix else []
    lines += ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for p in points:
        cells = [f"{p.values[n]:g}" for n in names] + [f"{r.error:+.1%}" for r in p.rows]
        cells.append(f"{statistics.fmean(abs(r.error) for r in p.rows):.1%}")
        cells += [f"{s.predicted - 1:+.1%}" for s in speedups(p.rows)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def grid_json(points: Sequence[GridPoint]) -> dict[str, Any]:
    """A ``--grid`` scan as ``{"grid": [...]}``: each point's values, its runs (id, predicted, error), their mean
    |error| and the selected pairs' speedups (run, baseline, predicted and measured ratios)."""
    return {"grid": [{"values": dict(p.values),
                      "runs": [{"id": r.id, "predicted": r.predicted, "error": r.error} for r in p.rows],
                      "mean_abs_error": statistics.fmean(abs(r.error) for r in p.rows),
                      "speedups": [{"run": s.run, "baseline": s.baseline, "predicted": s.predicted,
                                    "measured": s.measured} for s in speedups(p.rows)]} for p in points]}


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
    parser.add_argument("--comm", action="append", default=[], metavar="FIELD=VALUE",
                        help="a scalar CommCosts field (sim/comm/costs.py) over each run's costs")
    parser.add_argument("--run", action="append", default=[], metavar="TEXT", help="only runs whose id contains it")
    parser.add_argument("--breakdown", action="store_true", help="each run's step breakdown (seconds)")
    parser.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...",
                        help=f"scan a joint parameter over these values (repeatable: their product, at most "
                             f"{MAX_GRID_POINTS} points): one row per point")
    parser.add_argument("--json", action="store_true", help="print {\"runs\": [...], \"mean_abs_error\": ...}")
    args = parser.parse_args(argv)
    try:
        params, _ = trial_structure(args.fix, [])
        comm = comm_changes_from(args.comm)
        points = grid_points(args.grid, [*args.fix, *(COMM_PREFIX + item for item in args.comm)])
        if args.grid and args.breakdown:
            raise ConfigError("--breakdown: not with --grid (one table row a point); give the point with --fix")
        changes: dict[str, Any] = {"stacks": stack_trial(args.stack), "plan": plan_changes_from(args.plan),
                                   "comm": comm, "select": args.run}
        grid = what_if_grid(points, args.dataset, params=params, **changes) if args.grid else []
        rows = [] if args.grid else what_if(args.dataset, params=params, **changes)
    except MoesimError as err:
        print(f"error: {err}")
        return 2
    if grid:
        print(json.dumps(grid_json(grid), indent=1) if args.json else "\n".join(grid_markdown(grid)))
    else:
        print(json.dumps(what_if_json(rows), indent=1) if args.json else "\n".join(what_if_markdown(rows, args.breakdown)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
