"""Where a change's seconds go: for every two measured runs of one system that differ in a single plan field (the
all-to-all backend, the precision, the micro-batch), the step seconds the change moves, measured against
predicted, and the predicted move split by breakdown component (:func:`sim.predict.breakdown.breakdown`).

A speedup's error says only that the model is off; the budget says which seconds it moves and how many the
measurement leaves for them. Each move is also given per MoE layer pass (one micro-batch through one MoE layer
of the busiest pipeline rank: forward, recompute and backward), the unit in which two systems with the same
per-pass traffic compare; and the move predicted at the calibration's kernel rates (the run's release scalar
at 1, every other joint parameter as shipped), which tells a mechanism that moves the wrong seconds from a release
scalar that scales the right ones:

    python -m studies.change_budget                           # the shipped dataset
    python -m studies.change_budget studies/data/efa_runs.toml
    python -m studies.change_budget --held-out                # the held-out files (EFA aside), summarised
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.errors import MoesimError
from sim.joint import shipped_values
from sim.stacks import profile_for
from studies._sim import predict_run
from studies.dataset import MEASURED_RUNS, MeasuredRun, load_runs, resolve_run
from studies.ratio_check import RATIO_FILES

__all__ = ["ChangeBudget", "budget_markdown", "budget_summary_markdown", "change_budgets", "held_out_budgets",
           "kernel_rate_params", "one_change_pairs", "plan_changes"]

#: A component is named in a budget when it moves at least this share of the predicted move (the rest is "other").
NAMED_SHARE = 0.01
#: At most this many components are named per budget.
NAMED_MAX = 4


@dataclass(frozen=True)
class ChangeBudget:
    """The step seconds one change moves (``after`` minus ``before``: negative is a saving)."""

    before: str
    after: str
    field: str
    change: str
    measured_step_s: tuple[float, float]
    predicted_step_s: tuple[float, float]
    #: predicted seconds moved per breakdown component, largest move first
    parts: tuple[tuple[str, float], ...]
    #: MoE layer passes a step of the busiest pipeline rank runs before the change (micro-batches x MoE layers per
    #: rank; 0 for a dense model)
    moe_passes: int
    #: predicted steps (before, after) at the calibration's kernel rates: the stack release's joint scalar at 1
    #: (:func:`kernel_rate_params`); None for a release the joint calibration does not cover
    kernel_rate_step_s: tuple[float, float] | None = None

    @property
    def measured_delta_s(self) -> float:
        return self.measured_step_s[1] - self.measured_step_s[0]

    @property
    def predicted_delta_s(self) -> float:
        return self.predicted_step_s[1] - self.predicted_step_s[0]

    @property
    def measured_share(self) -> float:
        """The measured move as a share of the measured step before the change."""
        return self.measured_delta_s / self.measured_step_s[0]

    @property
    def predicted_share(self) -> float:
        """The predicted move as a share of the predicted step before the change."""
        return self.predicted_delta_s / self.predicted_step_s[0]

    @property
    def move_ratio(self) -> float | None:
        """Measured over predicted move: the factor the components that carry the predicted move would need (or
        the share of the move something outside the model carries); None when the model predicts no move.

        >>> ChangeBudget("a", "b", "precision", "bf16 -> mxfp8", (10.0, 9.0), (12.0, 10.0), (), 0).move_ratio
        0.5
        """
        return self.measured_delta_s / self.predicted_delta_s if abs(self.predicted_delta_s) > 1e-9 else None

    @property
    def kernel_rate_delta_s(self) -> float | None:
        """The move predicted at the calibration's kernel rates (None where no release scalar applies)."""
        k = self.kernel_rate_step_s
        return None if k is None else k[1] - k[0]

    @property
    def kernel_rate_ratio(self) -> float | None:
        """Measured over the move at kernel rates: near 1 where the mechanisms move the right seconds and the
        release scalar, applied to them, is what puts :attr:`move_ratio` off.

        >>> ChangeBudget("a", "b", "precision", "bf16 -> mxfp8", (10.0, 9.0), (12.0, 10.0), (), 0, (8.0, 7.0)).kernel_rate_ratio
        1.0
        """
        d = self.kernel_rate_delta_s
        return None if d is None or abs(d) <= 1e-9 else self.measured_delta_s / d


def one_change_pairs(runs: Sequence[MeasuredRun]) -> list[tuple[MeasuredRun, MeasuredRun, str]]:
    """Pairs of runs of one model, GPU, scale, cluster and stack release whose plans differ in exactly one field,
    in dataset order, with that field.

    >>> [(a.id, b.id, f) for a, b, f in one_change_pairs(load_runs()) if a.gpu == "h100"]
    [('titan-dsv3-h100-bf16', 'titan-dsv3-h100-bf16-deepep', 'ep_backend')]
    """
    out = []
    for a, b in itertools.combinations(runs, 2):
        if (a.model, a.gpu, a.gpus, a.cluster, a.stack, a.release) != (b.model, b.gpu, b.gpus, b.cluster, b.stack,
                                                                        b.release):
            continue
        differ = sorted(k for k in set(a.plan) | set(b.plan) if a.plan.get(k) != b.plan.get(k))
        if len(differ) == 1:
            out.append((a, b, differ[0]))
    return out


def kernel_rate_params(stack_name: str) -> dict[str, float] | None:
    """Joint parameters that put release ``stack_name``'s scalar at 1 (the calibration's kernel rates), or None
    for a release the joint calibration has no scalar for.

    >>> kernel_rate_params("torchtitan")
    {'release.torchtitan': 1.0}
    """
    name = f"release.{stack_name}"
    return {name: 1.0} if name in shipped_values() else None


def _step(run: MeasuredRun) -> tuple[float, float, dict[str, float], int, float | None]:
    """(measured step seconds, predicted step seconds, predicted breakdown, MoE passes, predicted step seconds at
    kernel rates or None) of ``run``."""
    model, cluster, plan = resolve_run(run)
    stack_name = profile_for(run.stack, run.release)
    pred = predict_run(model, cluster, plan, stack_name, name=run.id)
    params = kernel_rate_params(stack_name)
    at_rates = None if params is None else predict_run(model, cluster, plan, stack_name, name=run.id,
                                                       params=params).step_time_s
    tokens_per_gpu = plan.tokens_per_step / cluster.n_gpus
    passes = plan.n_microbatches * model.n_moe_layers // max(1, plan.pp)
    return tokens_per_gpu / run.measured_tokens_per_s_per_gpu, pred.step_time_s, dict(pred.breakdown), passes, at_rates


def plan_changes(before: MeasuredRun, after: MeasuredRun) -> list[tuple[str, str, str]]:
    """(field, value before, value after) of every field of the two runs' resolved plans that differs (a field a
    run's file leaves out reads as the value the plan takes), but the data-parallel widths derived from them."""
    a, b = resolve_run(before)[2].as_dict(), resolve_run(after)[2].as_dict()
    return [(k, str(a[k]), str(b[k])) for k in sorted(b) if a[k] != b[k] and k not in ("dp_shard", "dp_replicate")]


def change_budgets(path: str | Path | None = None) -> list[ChangeBudget]:
    """The budget of every one-change pair of the dataset at ``path`` (default: the shipped one); a pair a
    prediction cannot be made for is left out."""
    runs = load_runs(path)
    steps: dict[str, tuple[float, float, dict[str, float], int, float | None] | None] = {}
    for run in runs:
        try:
            steps[run.id] = _step(run)
        except MoesimError:
            steps[run.id] = None
    out = []
    for a, b, field in one_change_pairs(runs):
        sa, sb = steps[a.id], steps[b.id]
        if sa is None or sb is None:
            continue
        moved = {k: sb[2].get(k, 0.0) - sa[2].get(k, 0.0) for k in set(sa[2]) | set(sb[2])}
        parts = tuple(sorted(((k, v) for k, v in moved.items() if abs(v) > 1e-9), key=lambda kv: (-abs(kv[1]), kv[0])))
        change = next((f"{old} -> {new}" for k, old, new in plan_changes(a, b) if k == field), "")
        rates = None if sa[4] is None or sb[4] is None else (sa[4], sb[4])
        out.append(ChangeBudget(a.id, b.id, field, change, (sa[0], sb[0]), (sa[1], sb[1]), parts, sa[3], rates))
    return out


def held_out_budgets() -> list[ChangeBudget]:
    """The one-change pairs of every held-out file but the AWS EFA matrix (:data:`studies.ratio_check.RATIO_FILES`;
    the EFA matrix, a transport no fit saw, is summarised on its own): which changes the model moves by the seconds
    the runs it never read move."""
    return [b for name in RATIO_FILES for b in change_budgets(MEASURED_RUNS.parent / name)]


def _named(budget: ChangeBudget) -> str:
    """The components that carry the predicted move, then the rest as ``other``."""
    scale = max(abs(v) for _, v in budget.parts) if budget.parts else 0.0
    named = [(k, v) for k, v in budget.parts if abs(v) >= NAMED_SHARE * scale][:NAMED_MAX]
    rest = sum(v for k, v in budget.parts) - sum(v for _, v in named)
    text = [f"{k} {v:+.2f}" for k, v in named]
    if abs(rest) >= 0.005:
        text.append(f"other {rest:+.2f}")
    return ", ".join(text) or "-"


def _ratio(ratio: float | None) -> str:
    """A move ratio as ``0.51x`` (``-`` where the model predicts no move)."""
    return "-" if ratio is None else f"{ratio:.2f}x"


def _seconds(seconds: float | None) -> str:
    """A signed move in seconds (``-`` where there is none to give)."""
    return "-" if seconds is None else f"{seconds:+.2f}"


def _per_pass(seconds: float, passes: int) -> str:
    """Milliseconds per MoE layer pass (``-`` for a model without MoE layers)."""
    return f"{1e3 * seconds / passes:+.1f}" if passes else "-"


def budget_markdown(path: str | Path | None = None, budgets: Sequence[ChangeBudget] | None = None) -> list[str]:
    """The budgets of the dataset at ``path`` (or ``budgets``, already computed) as a markdown section."""
    budgets = change_budgets(path) if budgets is None else budgets
    if not budgets:
        return []
    lines = ["## Where a change's seconds go (runs of one system that differ in one plan field)", "",
             ("Step seconds moved by the change (after minus before; negative saves), measured (from each run's "
             "tokens/s) against predicted, and the predicted move split by breakdown component (`python -m "
             "studies.change_budget`). Per pass: the same moves per MoE layer and micro-batch of the busiest "
             "pipeline rank (forward, recompute and backward), in ms. Measured / predicted: the factor the "
             "components that carry the predicted move would need for the measured one (1: the move is right; "
             "far from 1: those components are off by it, or a cost that moves with the change is missing). At "
             "kernel rates: the predicted move with the release's joint scalar at 1 (every other parameter as "
             "shipped), and measured over it: where that is near 1 and the shipped ratio is not, the mechanisms "
             "move the right seconds and the scalar, which scales them with everything else, is what is off."), "",
             ("| before | after | change | measured step s | predicted step s | measured move s | predicted move s "
             "| measured / predicted | move at kernel rates s | measured / that | measured / pass ms | predicted / "
             "pass ms | predicted move by component (s) |"),
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for b in budgets:
        ms, ps = b.measured_step_s, b.predicted_step_s
        lines.append(f"| {b.before} | {b.after} | {b.field}: {b.change} | {ms[0]:.2f} -> {ms[1]:.2f} | "
                     f"{ps[0]:.2f} -> {ps[1]:.2f} | {b.measured_delta_s:+.2f} | {b.predicted_delta_s:+.2f} | "
                     f"{_ratio(b.move_ratio)} | {_seconds(b.kernel_rate_delta_s)} | {_ratio(b.kernel_rate_ratio)} | "
                     f"{_per_pass(b.measured_delta_s, b.moe_passes)} | {_per_pass(b.predicted_delta_s, b.moe_passes)} | "
                     f"{_named(b)} |")
    lines.append("")
    return lines


#: A move smaller than this share of the step counts as none when directions are compared.
STILL = 0.005
#: The title of :func:`held_out_budgets`' summary (``--held-out``; docs/transfer.md).
HELD_OUT_TITLE = ("The held-out files' one-field changes (EFA aside): which way, and by how much of the model's move, "
                  "each moves the step (`python -m studies.change_budget --held-out`)")


def _direction(share: float) -> int:
    """+1 (slower), -1 (faster) or 0 (within :data:`STILL` of the step)."""
    return 0 if abs(share) < STILL else (1 if share > 0 else -1)


def budget_summary_markdown(path: str | Path | None = None, title: str = "",
                            budgets: Sequence[ChangeBudget] | None = None) -> list[str]:
    """The budgets of the dataset at ``path`` grouped by change (``field: before -> after``): how many pairs, the
    median move as a share of the step before it, measured and predicted, and in how many pairs the prediction
    moves the step the way the measurement does (the answer a user asking "which backend?" acts on; a move under
    :data:`STILL` of the step is no move), and the median of the seconds moved, measured over predicted
    (:attr:`ChangeBudget.move_ratio`: 1 when the model moves the step by as much as it moved; ``-`` when no pair's
    predicted move is a move). ``budgets``: already computed (``path`` is then not read)."""
    groups: dict[str, list[ChangeBudget]] = {}
    for b in change_budgets(path) if budgets is None else budgets:
        groups.setdefault(f"{b.field}: {b.change}", []).append(b)
    if not groups:
        return []
    lines = [f"### {title or 'Changes, summarised'}", "",
             "| change | pairs | median measured move | median predicted move | same direction | median measured / predicted |",
             "|---|---:|---:|---:|---:|---:|"]
    for change in sorted(groups):
        bs = groups[change]
        measured = statistics.median(b.measured_share for b in bs)
        predicted = statistics.median(b.predicted_share for b in bs)
        same = sum(_direction(b.measured_share) == _direction(b.predicted_share) for b in bs)
        ratios = [b.move_ratio for b in bs if b.move_ratio is not None and _direction(b.predicted_share)]
        ratio = _ratio(statistics.median(ratios)) if ratios else "-"
        lines.append(f"| {change} | {len(bs)} | {measured * 100:+.1f}% | {predicted * 100:+.1f}% | {same} of {len(bs)} "
                     f"| {ratio} |")
    lines.append("")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.change_budget", description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", nargs="?", help="a measured-runs file (default: the shipped dataset)")
    parser.add_argument("--held-out", action="store_true",
                        help="summarise the one-change pairs of every held-out file but the EFA matrix")
    args = parser.parse_args(argv)
    if args.held_out and args.dataset:
        print("error: --held-out reads the held-out files; give no dataset with it")
        return 2
    try:
        if args.held_out:
            lines = budget_summary_markdown(budgets=held_out_budgets(), title=HELD_OUT_TITLE)
        else:
            budgets = change_budgets(args.dataset)
            lines = budget_markdown(budgets=budgets) + budget_summary_markdown(budgets=budgets)
    except MoesimError as err:
        print(f"error: {err}")
        return 2
    print("\n".join(lines) if lines else "no two runs of one system differ in exactly one plan field")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
