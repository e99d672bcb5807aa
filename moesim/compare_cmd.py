"""``moesim compare SCENARIO [--runs FILE] [--json]``: variants side by side, each one's ratio to the first, and
the ratio's p10-p90 from the residuals of ratios in the validation data.

SCENARIO is a compare file or any scenario file or built-in scenario name (format: :mod:`studies.compare`);
its variants may change the model, GPU, cluster, GPU count, stack, NIC rate, calibration and any plan field.
Each variant is predicted exactly as ``moesim predict --model M --gpu G --gpus N --cluster C --stack S
--nic-gbps X --calibration K [plan flags]`` predicts it (:func:`moesim.predict_cmd` builds it), so the
two commands always agree. ``--runs FILE``: the measured-runs dataset the ratio residuals come from (default:
the shipped ``studies/data/measured_runs.toml``). ``--json`` prints ``{"variants": [...], "ratios": [{"name",
"ratio", "p10", "p90", ...}]}`` with no NaN or Infinity (null where there is no number). Bad input: one line,
exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING, Any

from moesim import predict_cmd
from moesim.render import render_table
from sim.errors import ConfigError, MoesimError

if TYPE_CHECKING:  # studies.compare is imported when the command runs: other commands start without it
    from studies.compare import CompareFile, CompareVariant, MeasuredPoint

__all__ = ["JSON_SCHEMA_VERSION", "add_compare", "compare", "format_compare", "run_compare"]

JSON_SCHEMA_VERSION = 1
GIB = float(1 << 30)
_PLAN_NAMES = predict_cmd.PLAN_FLAG_FIELDS


def add_compare(subparsers: Any) -> None:
    """Register ``moesim compare`` on ``subparsers``."""
    p = subparsers.add_parser("compare", help="variants side by side (any model, GPU, count, stack, plan), "
                              "ratios with p10-p90",
                              description="Predict variants side by side (each may change the model, GPU, cluster, "
                                          "GPU count, stack or plan): each one's ratio to the first, with the "
                                          "ratio's p10-p90 from measured runs' ratio residuals.")
    p.add_argument("scenario", help="compare TOML (a scenario file whose variants may change anything) or a "
                   "built-in scenario name")
    p.add_argument("--runs", metavar="FILE", help="measured-runs TOML the ratio residuals come from (default: "
                   "the shipped studies/data/measured_runs.toml)")
    p.add_argument("--json", action="store_true", help='print {"variants": [...], "ratios": [...]}')
    p.set_defaults(handler=run_compare)


def _predict_args(variant: CompareVariant) -> argparse.Namespace:
    """``moesim predict``'s arguments for ``variant``: its parser's defaults, then the variant's fields."""
    parser = argparse.ArgumentParser(add_help=False)
    predict_cmd.add_predict_arguments(parser)
    args = parser.parse_args([])
    args.model, args.gpus, args.gpu, args.cluster = variant.model, variant.gpus, variant.gpu, variant.cluster
    args.stack, args.nic_gbps, args.calibration = variant.stack, variant.nic_gbps, variant.calibration
    missing = sorted(set(variant.plan) - set(_PLAN_NAMES))
    if missing:  # a ParallelPlan field moesim predict has no flag for: refuse rather than drop it
        raise ConfigError(f"variant {variant.name!r}: plan field(s) {', '.join(missing)} cannot be set through "
                          "moesim predict's path")
    for key, value in variant.plan.items():
        setattr(args, key, value)
    return args


def _signature(variant: CompareVariant, pred: Any, provenance: dict[str, Any]) -> str:
    """What makes two variants the same prediction: resolved model, cluster, GPUs, stack, costs and plan."""
    keys = ("model", "model_source", "cluster", "gpu", "n_gpus", "calibration", "stack")
    return json.dumps({"inputs": {k: provenance.get(k) for k in keys}, "nic_gbps": variant.nic_gbps,
                       "plan": pred.plan}, sort_keys=True, default=str)


def compare(spec: CompareFile, points: list[MeasuredPoint]) -> dict[str, Any]:
    """Predict every variant of ``spec`` through ``moesim predict``'s path and put each one's ratio to the
    first (tokens/s per GPU) with its p10-p90 from the ratio residuals of ``points``. Returns the JSON object."""
    from sim.interval_data import load_shipped
    from sim.uncertainty import boundary_band, ratio_boundary_shift, step_and_boundary
    from studies import compare as studies_compare

    rows: list[dict[str, Any]] = []
    preds, sigs, notes = [], [], []
    for variant in spec.variants:
        args = _predict_args(variant)
        try:
            run = predict_cmd._compute(args)
            intervals, _ = predict_cmd._intervals(run.predictions, args, run.provenance.get("cluster"))
        except MoesimError as err:
            raise ConfigError(f"{spec.path}: variant {variant.name!r}: {err}") from None
        pred = run.predictions[0]
        pred.name = variant.name
        pred.measured_tokens_per_s_per_gpu = variant.measured_tokens_per_s_per_gpu
        pred.source = variant.source
        preds.append(pred)
        sigs.append(_signature(variant, pred, run.provenance))
        for note in run.notes:
            line = f"{variant.name}: {note}"
            if line not in notes:
                notes.append(line)
        iv = intervals[0]
        rows.append({"name": variant.name, "model": pred.model, "gpu": pred.gpu,
                     "cluster": run.provenance.get("cluster"), "n_gpus": pred.n_gpus, "stack": pred.stack,
                     "tokens_per_s_per_gpu": pred.tokens_per_s_per_gpu,
                     "tokens_per_s": pred.tokens_per_s_per_gpu * pred.n_gpus, "step_time_s": pred.step_time_s,
                     "tflops_per_gpu": pred.tflops_per_gpu, "mfu": pred.mfu,
                     "peak_memory_gib": pred.peak_memory_bytes / GIB,
                     "memory_capacity_gib": pred.memory_capacity_bytes / GIB, "fits_in_memory": pred.fits_in_memory,
                     "measured_tokens_per_s_per_gpu": variant.measured_tokens_per_s_per_gpu,
                     "source": variant.source or None, "fitted": variant.fitted,
                     "plan_summary": predict_cmd.resolved_plan(pred.plan, predict_cmd._stack(args)),
                     "interval": iv.to_dict() if iv is not None else None,
                     "provenance": run.provenance, "prediction": pred.to_dict()})
    ref, ref_sig = preds[0], sigs[0]
    shipped = load_shipped()
    band = boundary_band(shipped.runs) if shipped is not None else None  # the step boundary's, for each ratio
    own = [_own_runs(v, p, row["cluster"], points) for v, p, row in zip(spec.variants, preds, rows, strict=True)]
    ratios = []
    for pred, sig, variant, runs, row in zip(preds, sigs, spec.variants, own, rows, strict=True):
        pair = [rows[0]] if row is rows[0] else [rows[0], row]
        beyond = "; ".join(f"{r['name']} is beyond the validated envelope" for r in pair if _beyond(r))
        widen = max((_widen(r) for r in pair if _beyond(r)), default=1.0)
        shift = ratio_boundary_shift(*step_and_boundary(pred), *step_and_boundary(ref), band, beyond=bool(beyond))
        iv = studies_compare.pair_interval(pred.tokens_per_s_per_gpu / ref.tokens_per_s_per_gpu, points,
                                           same_model=pred.model == ref.model, same_gpu=pred.gpu == ref.gpu,
                                           identical=sig == ref_sig, exclude=sorted({*own[0], *runs}),
                                           beyond=beyond, widen=widen, boundary_shift=shift)
        ref_meas = spec.variants[0].measured_tokens_per_s_per_gpu
        meas = variant.measured_tokens_per_s_per_gpu
        ratios.append({"name": pred.name, "ratio": iv.ratio, "p10": iv.p10, "p90": iv.p90, "n_pairs": iv.n_pairs,
                       "basis": iv.basis, "measured_ratio": meas / ref_meas if meas and ref_meas else None})
    result: dict[str, Any] = _finite({"schema_version": JSON_SCHEMA_VERSION, "scenario": spec.name, "path": spec.path,
                                      "description": spec.description, "reference": spec.variants[0].name,
                                      "variants": rows,
                                      "ratios": ratios, "notes": notes, "ratio_note": RATIO_NOTE})
    return result


def _beyond(row: dict[str, Any]) -> bool:
    """Whether a variant's own interval places it beyond the validated envelope."""
    from sim.uncertainty import DISTANCES

    return bool((row.get("interval") or {}).get("distance") == DISTANCES[2])


def _widen(row: dict[str, Any]) -> float:
    """The multiplier a variant's own interval was widened by beyond the envelope (its interval's ``widen``)."""
    from sim.uncertainty import BEYOND_FACTOR

    return float((row.get("interval") or {}).get("widen", BEYOND_FACTOR))


def _own_runs(variant: CompareVariant, pred: Any, cluster: str, points: list[MeasuredPoint]) -> list[str]:
    """The measured runs this variant reproduces (same model, GPUs, cluster, stack and plan at the default
    costs): their residuals are left out of its ratio's interval, as a prediction's own residual is."""
    if variant.nic_gbps is not None or variant.calibration is not None:
        return []
    from studies import compare as studies_compare

    key = studies_compare.inputs_key(pred.model, pred.gpu, pred.n_gpus, cluster, pred.stack, pred.plan)
    return [p.run_id for p in points if p.inputs == key]


RATIO_NOTE = ("ratio: tokens/s per GPU over the first variant's (the cluster-throughput ratio is it times the GPU "
              "counts' ratio); p10-p90: the predicted ratio times the 10th-90th percentiles of "
              "measured/predicted ratios over the ordered pairs of measured runs that relate as the two variants do "
              "(same model or not, same GPU or not), the variants' own measured runs left out, widened where a "
              "variant lies beyond the validated envelope, with the step boundary's measured spread moved through both "
              "steps at once added in quadrature (studies.compare; sim.uncertainty.ratio_boundary_shift)")


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (JSON without NaN/Infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _ratio_cell(r: dict[str, Any]) -> tuple[str, str]:
    if r["p10"] is None or r["p90"] is None:
        return f"{r['ratio']:.3f}x", "-"
    return f"{r['ratio']:.3f}x", f"{r['p10']:.3f}-{r['p90']:.3f}x"


def format_compare(result: dict[str, Any]) -> str:
    """The side-by-side table, each variant's plan, and the notes (ratio basis, the variants' own notes)."""
    headers = ["variant", "GPUs", "stack", "tok/s/GPU", "measured", "step s", "MFU", "mem GiB", "ratio",
               "ratio p10-p90", "meas. ratio"]
    rows = []
    for v, r in zip(result["variants"], result["ratios"], strict=True):
        tput = f"{v['tokens_per_s_per_gpu']:.1f}" + ("" if v["fits_in_memory"] else " (does not fit)")
        meas = v["measured_tokens_per_s_per_gpu"]
        ratio, spread = _ratio_cell(r)
        rows.append([v["name"] + (" [fitted]" if v["fitted"] else ""), f"{v['n_gpus']} x {v['gpu']} ({v['cluster']})",
                     v["stack"], tput, f"{meas:g}" if meas else "-", f"{v['step_time_s']:.2f}",
                     f"{v['mfu'] * 100:.1f}%", f"{v['peak_memory_gib']:.1f} / {v['memory_capacity_gib']:.0f}",
                     ratio, spread, f"{r['measured_ratio']:.3f}x" if r["measured_ratio"] else "-"])
    title = f"{result['scenario']}: {result['description']}".strip(": ")
    title += f"\nreference: {result['reference']}"
    lines = [f"{v['name']}: {v['model']}; {v['plan_summary']}" for v in result["variants"]]
    basis = [f"{r['name']}: p10-p90 from {r['basis']}" for r in result["ratios"][1:]]
    notes = [*lines, "", result["ratio_note"], *basis, *result["notes"],
             "MFU: model FLOPs (TorchTitan formula) / the GPU's dense BF16 peak; memory: peak per GPU / HBM in GiB"]
    return render_table(headers, rows, title=title, notes=notes).rstrip("\n")


def run_compare(args: argparse.Namespace) -> int:
    """Run ``moesim compare``; returns the exit code (2 and one message on a user error)."""
    from studies import compare as studies_compare

    try:
        spec = studies_compare.load_compare(args.scenario)
        points = studies_compare.measured_points(args.runs)
        result = compare(spec, points)
    except MoesimError as err:
        print(f"moesim compare: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except OSError as err:
        where = f"{err.filename}: " if err.filename else ""
        print(f"moesim compare: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2, allow_nan=False))
    else:
        print(format_compare(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="moesim compare", description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--runs")
    parser.add_argument("--json", action="store_true")
    return run_compare(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
