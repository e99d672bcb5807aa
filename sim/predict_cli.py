"""``moesim predict``: arguments, scenario files, tables and JSON. A thin layer over :func:`sim.predict.predict`.

- no arguments: the built-in seed scenario (``dsv3-671b-b200``: three published variants and the
  unpublished MXFP8-without-DeepEP one) as a table with the measured numbers beside the predictions;
- ``--model M --gpu G --gpus N [plan flags]``: one plan; unset data-parallel degrees are derived from the
  GPU count as TorchTitan does (``dp_shard = N / (dp_replicate * cp * tp * pp)``);
- ``--scenario FILE_OR_NAME``: a scenario TOML (``[scenario]`` model/cluster/gpus, ``[base]`` plan fields,
  ``[[variant]]`` tables with ``name``, optional ``plan`` overrides, ``measured_tokens_per_s_per_gpu``,
  ``source``).

``--json`` prints one object with a ``predictions`` list; ``--trace FILE`` writes a Chrome trace. Errors a
user can cause print one line and return 2. Standalone: ``python -m sim.predict_cli``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from sim.catalog import load_cluster, load_model
from sim.errors import ConfigError, MoesimError
from sim.loaders import plan_from_mapping, read_toml
from sim.specs import AC_MODES, EP_BACKENDS, PP_SCHEDULES, PRECISIONS, ClusterSpec

__all__ = ["add_predict_arguments", "run_predict", "load_scenario", "derive_plan_fields", "format_table", "Scenario",
           "main", "DEFAULT_SCENARIO"]

DEFAULT_SCENARIO = "dsv3-671b-b200"

_PLAN_INTS = ("tp", "pp", "vpp", "ep", "etp", "dp_shard", "dp_replicate", "cp", "seq_len", "global_batch",
              "micro_batch", "deepep_sms", "routing_seed")


def add_predict_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``moesim predict``'s options to ``parser``."""
    g = parser.add_argument_group("what and where")
    g.add_argument("--scenario", help="scenario TOML file or built-in name (e.g. dsv3-671b-b200)")
    g.add_argument("--model", help="catalog model name or model file (config.json / TOML)")
    g.add_argument("--gpu", help="catalog GPU name (default: the cluster template's)")
    g.add_argument("--gpus", type=int, help="number of GPUs")
    g.add_argument("--cluster", default=None, help="cluster template or TOML (default: hgx-<gpu>)")
    g.add_argument("--nic-gbps", type=float, help="per-NIC line rate in Gb/s (overrides the cluster's)")
    g.add_argument("--calibration", help="calibration.json (a serialised CostModel) instead of the defaults")
    p = parser.add_argument_group("parallel plan (ParallelPlan fields)")
    for name in _PLAN_INTS:
        p.add_argument("--" + name.replace("_", "-"), type=int, dest=name)
    p.add_argument("--pp-schedule", choices=PP_SCHEDULES, dest="pp_schedule")
    p.add_argument("--ac", choices=AC_MODES)
    p.add_argument("--precision", choices=PRECISIONS)
    p.add_argument("--ep-backend", choices=EP_BACKENDS, dest="ep_backend")
    p.add_argument("--routing", help="balanced | round-robin | zipf:<s> | dirichlet:<alpha> | tokens-per-expert file")
    o = parser.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print one JSON object with a 'predictions' list")
    o.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace of representative ranks")


@dataclasses.dataclass
class Scenario:
    name: str
    description: str
    model: str
    cluster: str
    gpus: int
    base: dict[str, Any]
    variants: list[dict[str, Any]]


def load_scenario(name_or_path: str) -> Scenario:
    """A scenario by built-in name or TOML path (:class:`ConfigError` on unknown keys or a bad file)."""
    from sim.scenarios import scenario_names, scenario_text

    if name_or_path in scenario_names():
        import tomllib

        data = tomllib.loads(scenario_text(name_or_path))
        where = name_or_path
    else:
        if not Path(name_or_path).exists() and not name_or_path.endswith(".toml"):
            raise ConfigError(
                f"unknown scenario {name_or_path!r}; built in: {', '.join(scenario_names())} (or give a TOML path)"
            )
        data = read_toml(name_or_path)
        where = str(name_or_path)
    unknown = set(data) - {"scenario", "base", "variant"}
    if unknown:
        raise ConfigError(f"scenario {where!r}: unknown table(s) {', '.join(sorted(unknown))}; allowed: scenario, base, variant")
    head = data.get("scenario", {})
    for key in ("model", "gpus"):
        if key not in head:
            raise ConfigError(f"scenario {where!r}: [scenario] needs {key!r}")
    extra = set(head) - {"name", "description", "model", "cluster", "gpus", "gpu"}
    if extra:
        raise ConfigError(f"scenario {where!r}: unknown key(s) {', '.join(sorted(extra))} in [scenario]")
    variants = data.get("variant", [{"name": "base"}])
    for v in variants:
        bad = set(v) - {"name", "plan", "measured_tokens_per_s_per_gpu", "source"}
        if bad or "name" not in v:
            raise ConfigError(f"scenario {where!r}: each [[variant]] needs a name and may only hold plan, "
                              f"measured_tokens_per_s_per_gpu, source (got {', '.join(sorted(v))})")
    cluster = head.get("cluster") or f"hgx-{head.get('gpu', 'b200')}"
    return Scenario(head.get("name", where), head.get("description", ""), head["model"], cluster,
                    int(head["gpus"]), dict(data.get("base", {})), list(variants))


def _cluster(args: argparse.Namespace, name: str | None, gpus: int, gpu: str | None) -> ClusterSpec:
    cluster = load_cluster(name or f"hgx-{gpu or 'b200'}", n_gpus=gpus, gpu=gpu)
    if getattr(args, "nic_gbps", None):
        if args.nic_gbps <= 0:
            raise ConfigError(f"--nic-gbps must be positive, got {args.nic_gbps}")
        cluster = dataclasses.replace(cluster, nic_bw_bytes_per_s=args.nic_gbps * 1e9 / 8)
    return cluster


def _plan_fields(args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for name in (*_PLAN_INTS, "pp_schedule", "ac", "precision", "ep_backend", "routing"):
        v = getattr(args, name, None)
        if v is not None:
            out[name] = v
    return out


def derive_plan_fields(fields: dict[str, Any], n_gpus: int) -> dict[str, Any]:
    """Fill unset data-parallel degrees (and a default batch) from the GPU count, TorchTitan style."""
    f = dict(fields)
    inner = f.get("tp", 1) * f.get("pp", 1) * f.get("cp", 1)
    if n_gpus % inner:
        from sim.errors import PlanError

        raise PlanError(f"plan: tp ({f.get('tp', 1)}) * pp ({f.get('pp', 1)}) * cp ({f.get('cp', 1)}) = {inner} "
                        f"must divide the number of GPUs ({n_gpus})")
    dp = n_gpus // inner
    if "dp_shard" not in f:
        rep = f.get("dp_replicate", 1)
        f["dp_shard"] = max(1, dp // rep)
    elif "dp_replicate" not in f:
        f["dp_replicate"] = max(1, dp // f["dp_shard"])
    if f.get("vpp", 1) > 1 and "pp_schedule" not in f:
        f["pp_schedule"] = "interleaved-1f1b"
    if "global_batch" not in f:
        local = max(8, 2 * f.get("pp", 1) * f.get("vpp", 1)) * f.get("micro_batch", 1)
        f["global_batch"] = local * f.get("dp_shard", 1) * f.get("dp_replicate", 1)
    return f


def _costs(args: argparse.Namespace, gpu: Any) -> Any:
    from sim.costs import CostModel

    if getattr(args, "calibration", None):
        try:
            text = Path(args.calibration).read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigError(f"{args.calibration}: {err.strerror}") from None
        return CostModel.from_json(text)
    return None


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
        return [predict(model, cluster, plan, _costs(args, cluster.gpu))], ""
    if args.model is None and args.scenario is None and (plan_args or args.gpus or args.gpu):
        raise ConfigError("--model is required when plan options are given (or use --scenario)")
    sc = load_scenario(args.scenario or DEFAULT_SCENARIO)
    model = load_model(args.model or sc.model)
    gpus = args.gpus or sc.gpus
    cluster = _cluster(args, args.cluster or sc.cluster, gpus, args.gpu)
    costs = _costs(args, cluster.gpu)
    preds = []
    for v in sc.variants:
        fields = {**sc.base, **v.get("plan", {}), **plan_args}
        if not isinstance(v.get("plan", {}), dict):
            raise ConfigError(f"scenario {sc.name!r}: variant {v['name']!r}: plan must be a table")
        plan = plan_from_mapping(derive_plan_fields(fields, gpus), f"scenario {sc.name!r} variant {v['name']!r}")
        p = predict(model, cluster, plan, costs, name=v["name"])
        if "measured_tokens_per_s_per_gpu" in v:
            p.measured_tokens_per_s_per_gpu = float(v["measured_tokens_per_s_per_gpu"])
        p.source = str(v.get("source", ""))
        preds.append(p)
    return preds, f"{sc.name}: {sc.description}".strip(": ")


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

            write_chrome_trace(preds, args.trace)
    except MoesimError as err:
        print(f"moesim predict: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"moesim predict: error: {err}", file=sys.stderr)
        return 2
    if getattr(args, "json", False):
        print(json.dumps({"predictions": [p.to_dict() for p in preds]}, indent=2))
    else:
        print(format_table(preds, title))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="moesim predict", description=__doc__.splitlines()[0])
    add_predict_arguments(parser)
    return run_predict(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
