"""``moesim predict``: arguments, scenario files, tables and JSON. A thin layer over :func:`sim.predict.predict`.

- no arguments: the built-in seed scenario (``dsv3-671b-b200``: three published variants and the
  unpublished MXFP8-without-DeepEP one) as a table with the measured numbers beside the predictions;
- ``--model M --gpu G --gpus N [plan flags]``: one plan; unset data-parallel degrees are derived from the
  GPU count as TorchTitan does (``dp_shard = N / (dp_replicate * cp * tp * pp)``);
- ``--scenario FILE_OR_NAME``: a scenario TOML (``[scenario]`` model/cluster/gpus, ``[base]`` plan fields,
  ``[[variant]]`` tables with ``name``, optional ``plan`` overrides, ``measured_tokens_per_s_per_gpu``,
  ``source``).

``--stack NAME|FILE`` picks the framework stack profile (named in the table's title and in each JSON
prediction's ``stack``). ``--json`` prints one object with a ``predictions`` list; ``--trace FILE`` writes a
Chrome trace. Errors a
user can cause print one line and return 2. Standalone: ``python -m moesim.predict_cmd``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from sim.catalog import default_cluster, load_cluster, load_model
from sim.errors import ConfigError, MoesimError
from sim.loaders import derive_plan_fields, plan_from_mapping
from sim.scenarios import DEFAULT_SCENARIO, load_scenario, run_scenario
from sim.specs import AC_MODES, EP_BACKENDS, PP_SCHEDULES, PRECISIONS, ClusterSpec

__all__ = ["add_predict_arguments", "run_predict", "format_table", "main"]

_PLAN_INTS = ("tp", "pp", "vpp", "ep", "etp", "dp_shard", "dp_replicate", "cp", "seq_len", "global_batch",
              "micro_batch", "deepep_sms", "routing_seed")


def add_predict_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``moesim predict``'s options to ``parser``."""
    g = parser.add_argument_group("what and where")
    g.add_argument("--scenario", help="scenario TOML file or built-in name (e.g. dsv3-671b-b200)")
    g.add_argument("--model", help="catalog model name or model file (config.json / TOML)")
    g.add_argument("--gpu", help="catalog GPU name (default: the cluster template's)")
    g.add_argument("--gpus", type=int, help="number of GPUs")
    g.add_argument("--cluster", default=None, help="cluster template or TOML (default: the GPU's first template, "
                   "e.g. hgx-b200, gb200-nvl72)")
    g.add_argument("--nic-gbps", type=float, help="per-NIC line rate in Gb/s (overrides the cluster's)")
    g.add_argument("--calibration", help="calibration file (moesim calibrate fit/run) or bundled name, e.g. "
                   "h800-deepseek-trace, instead of the defaults")
    g.add_argument("--stack", help="framework stack profile: torchtitan | megatron | megatron-26.02 | deepseek | "
                   "a stack TOML (default: the scenario's, else torchtitan)")
    p = parser.add_argument_group("parallel plan (ParallelPlan fields)")
    for name in _PLAN_INTS:
        p.add_argument("--" + name.replace("_", "-"), type=int, dest=name)
    p.add_argument("--pp-schedule", choices=PP_SCHEDULES, dest="pp_schedule")
    p.add_argument("--ac", choices=AC_MODES)
    p.add_argument("--recompute-modules", dest="recompute_modules",
                   help="with --ac selective: comma-separated Megatron modules to recompute (e.g. mla_up_proj,moe_act); "
                        "default: the stack's")
    p.add_argument("--precision", choices=PRECISIONS)
    p.add_argument("--ep-backend", choices=EP_BACKENDS, dest="ep_backend")
    p.add_argument("--ep-overlap", action="store_true", default=None, dest="ep_overlap",
                   help="Megatron combined 1F1B: overlap one microbatch's all-to-alls with another's compute")
    p.add_argument("--routing", help="balanced | round-robin | zipf:<s> | dirichlet:<alpha> | tokens-per-expert file")
    o = parser.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print one JSON object with a 'predictions' list")
    o.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace of representative ranks")
    o.add_argument("--trace-microbatches", type=int, default=2, metavar="N", dest="trace_microbatches",
                   help="microbatches expanded to ops (compute and comm threads) in the trace (default 2)")


def _cluster(args: argparse.Namespace, name: str | None, gpus: int, gpu: str | None) -> ClusterSpec:
    cluster = load_cluster(name or default_cluster(gpu or "b200"), n_gpus=gpus, gpu=gpu)
    if getattr(args, "nic_gbps", None):
        if args.nic_gbps <= 0:
            raise ConfigError(f"--nic-gbps must be positive, got {args.nic_gbps}")
        cluster = dataclasses.replace(cluster, nic_bw_bytes_per_s=args.nic_gbps * 1e9 / 8)
    return cluster


def _plan_fields(args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for name in (*_PLAN_INTS, "pp_schedule", "ac", "recompute_modules", "precision", "ep_backend", "routing",
                 "ep_overlap"):
        v = getattr(args, name, None)
        if v is not None:
            out[name] = v
    return out


def _costs(args: argparse.Namespace, gpu: Any, stack: Any = None) -> Any:
    """The cost model of ``--calibration FILE`` (a :mod:`sim.calibration` file or bundled name) for ``gpu``;
    without one, the stack's own bundled calibration when it was measured on this GPU (``deepseek`` on h800:
    DeepSeek's trace), else moesim's defaults (None)."""
    from sim.calibration import STACK_CALIBRATIONS, load_calibration, to_cost_model

    if not getattr(args, "calibration", None) and stack is not None and stack.name in STACK_CALIBRATIONS:
        cal = load_calibration(STACK_CALIBRATIONS[stack.name])
        if cal.gpu == gpu.name:
            args.calibration_summary = cal.summary()
            args.calibration_sd = _calibration_sd(cal)
            return to_cost_model(cal, gpu)
    if getattr(args, "calibration", None):
        try:
            cal = load_calibration(args.calibration)
        except ConfigError as err:
            if "a bare CostModel" not in str(err):
                raise
            costs = _legacy_costs(args.calibration)
            args.calibration_summary = {"name": Path(args.calibration).stem, "path": str(args.calibration),
                                        "gpu": costs.gpu, "device": None, "method": "version-1 CostModel file "
                                        f"({costs.provenance})", "date": None, "git": None, "sources": []}
            return costs
        args.calibration_summary = cal.summary()
        args.calibration_sd = _calibration_sd(cal)
        return to_cost_model(cal, gpu)
    return None


def _legacy_costs(path: str) -> Any:
    """A version-1 file (a serialised CostModel, ``CostModel.to_json``): still read, named as such."""
    from sim.costs import CostModel

    try:
        with open(path, encoding="utf-8") as handle:
            return CostModel.from_json(handle.read())
    except (AttributeError, TypeError, ValueError) as err:
        raise ConfigError(f"{path}: malformed version-1 CostModel file: {err}") from None


def _calibration_sd(cal: Any) -> float:
    from sim.uncertainty import calibration_sd

    return calibration_sd(cal.tables.get("residuals", {}))


def _intervals(preds: list[Any], args: argparse.Namespace) -> list[Any]:
    """p10-p90 tokens/s per GPU of every prediction (:func:`sim.uncertainty.prediction_interval`): the
    held-out measured runs of the prediction's stack and the calibration's residuals."""
    from sim.uncertainty import prediction_interval

    sd = getattr(args, "calibration_sd", 0.0)
    return [prediction_interval(p, calibration_sd=sd) for p in preds]


def _stack(args: argparse.Namespace, scenario_stack: str = "") -> Any:
    from sim.stacks import load_stack

    return load_stack(getattr(args, "stack", None) or scenario_stack or None)


def _stack_title(stack: Any) -> str:
    return f"stack: {stack.name} ({stack.release})" if stack.release else f"stack: {stack.name}"


def _run(args: argparse.Namespace) -> tuple[list[Any], str]:
    from sim.predict import predict

    plan_args = _plan_fields(args)
    single = args.model is not None and args.scenario is None
    if single:
        if not args.gpus:
            raise ConfigError("--gpus is required with --model")
        model = load_model(args.model)
        cluster = _cluster(args, args.cluster, args.gpus, args.gpu)
        plan = plan_from_mapping(derive_plan_fields(plan_args, args.gpus), "plan (command line)")
        stack = _stack(args)
        return [predict(model, cluster, plan, _costs(args, cluster.gpu, stack), stack=stack)], _stack_title(stack)
    if args.model is None and args.scenario is None and (plan_args or args.gpus or args.gpu):
        raise ConfigError("--model is required when plan options are given (or use --scenario)")
    sc = load_scenario(args.scenario or DEFAULT_SCENARIO)
    model = load_model(args.model or sc.model)
    gpus = args.gpus or sc.gpus
    cluster = _cluster(args, args.cluster or sc.cluster, gpus, args.gpu)
    stack = _stack(args, sc.stack)
    preds = run_scenario(sc, model=model, cluster=cluster, costs=_costs(args, cluster.gpu, stack), overrides=plan_args,
                         stack=stack)
    return preds, "\n".join([f"{sc.name}: {sc.description}".strip(": "), _stack_title(stack)])


def format_table(preds: list[Any], title: str = "") -> str:
    """Predicted vs measured, speedups vs the first row, MFU and memory."""
    lines = [title] if title else []
    head = f"{'variant':<30} {'pred tok/s/GPU':>14} {'measured':>9} {'error':>7} {'speedup':>8} {'meas.':>7} " \
           f"{'step s':>8} {'TFLOPS':>7} {'MFU':>6} {'mem GB':>7} {'fits':>5}"
    lines += [head, "-" * len(head)]
    base = preds[0]
    for p in preds:
        meas = p.measured_tokens_per_s_per_gpu
        err = f"{(p.tokens_per_s_per_gpu / meas - 1) * 100:+.1f}%" if meas else "-"
        sp = f"{(p.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu - 1) * 100:+.1f}%"
        msp = f"{(meas / base.measured_tokens_per_s_per_gpu - 1) * 100:+.0f}%" if (
            meas and base.measured_tokens_per_s_per_gpu) else "-"
        lines.append(
            f"{p.name[:30]:<30} {p.tokens_per_s_per_gpu:>14.1f} {meas if meas else '-':>9} {err:>7} {sp:>8} "
            f"{msp:>7} {p.step_time_s:>8.1f} {p.tflops_per_gpu:>7.1f} {p.mfu * 100:>5.1f}% "
            f"{p.peak_memory_bytes / 1e9:>7.1f} {'yes' if p.fits_in_memory else 'NO':>5}"
        )
    return "\n".join(lines)


def run_predict(args: argparse.Namespace) -> int:
    """Run ``moesim predict``; returns the exit code (2 and one message on a user error)."""
    try:
        preds, title = _run(args)
        if getattr(args, "trace", None):
            from sim.trace import write_chrome_trace

            n_detail = getattr(args, "trace_microbatches", 2)
            if n_detail is None or n_detail < 0:
                raise ConfigError(f"--trace-microbatches must be zero or positive, got {n_detail}")
            write_chrome_trace(preds, args.trace, detail_microbatches=n_detail)
    except MoesimError as err:
        print(f"moesim predict: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"moesim predict: error: {err}", file=sys.stderr)
        return 2
    try:
        ivs = _intervals(preds, args)
    except MoesimError as err:
        print(f"moesim predict: error: {err}", file=sys.stderr)
        return 2
    cal = getattr(args, "calibration_summary", None)
    if getattr(args, "json", False):
        print(json.dumps({"calibration": cal, "predictions": [{**p.to_dict(), "interval": iv.to_dict()}
                                                              for p, iv in zip(preds, ivs)]}, indent=2))
    else:
        print(format_table(preds, title))
        print(f"calibration: {cal['name']} ({cal['path']}; {cal['gpu']}, {cal['method']}; sources: "
              f"{'; '.join(cal['sources'])})" if cal else "calibration: moesim defaults (datasheets and published "
              "microbenchmarks, sim.costs)")
        for p, iv in zip(preds, ivs):
            print(f"  {p.name[:30]:<30} p10-p90 tokens/s/GPU {iv.p10:8.1f} - {iv.p90:8.1f} (p50 {iv.p50:.1f}; "
                  f"stack {iv.stack}, {iv.n_runs} measured runs)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="moesim predict", description=__doc__.splitlines()[0])
    add_predict_arguments(parser)
    return run_predict(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
