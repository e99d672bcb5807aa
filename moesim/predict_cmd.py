"""``moesim predict``: arguments, scenario files, tables and JSON. A thin layer over :func:`sim.predict.predict`.

- no arguments: the built-in seed scenario (``dsv3-671b-b200``: three published variants and the
  unpublished MXFP8-without-DeepEP one) as a table with the measured numbers beside the predictions;
- ``--model M --gpu G --gpus N [plan flags]``: one plan; unset data-parallel degrees are derived from the
  GPU count as TorchTitan does (``dp_shard = N / (dp_replicate * cp * tp * pp)``);
- ``--scenario FILE_OR_NAME``: a scenario TOML (``[scenario]`` model/cluster/gpus, ``[base]`` plan fields,
  ``[[variant]]`` tables with ``name``, optional ``plan`` overrides, ``measured_tokens_per_s_per_gpu``,
  ``source``).

``--stack NAME|FILE`` picks the framework stack profile and ``--calibration FILE|NAME`` the kernel costs;
both are named in the output, with a p10-p90 interval per prediction. ``--json`` prints one object with a
``predictions`` list; ``--trace FILE`` writes a Chrome trace. Errors a
user can cause print one line and return 2. Standalone: ``python -m moesim.predict_cmd``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from moesim.argtypes import (
    finite_float,
    gpu_count,
    non_empty,
    plan_int,
    trace_microbatches,
)
from moesim.render import render_table
from sim.catalog import default_cluster, load_cluster, load_model
from sim.errors import ConfigError, MoesimError
from sim.loaders import (
    INTERLEAVED_DEFAULT_VPP,
    derive_plan_fields,
    parse_json,
    plan_from_mapping,
)
from sim.scenarios import DEFAULT_SCENARIO, load_scenario, run_scenario
from sim.specs import (
    AC_MODES,
    CP_COMM_TYPES,
    CUDA_GRAPH_SCOPES,
    EP_BACKENDS,
    GRAD_REDUCE_DTYPES,
    PP_SCHEDULES,
    PRECISIONS,
    TE_GRAPH_SCOPES,
    ClusterSpec,
)

__all__ = ["add_predict_arguments", "run_predict", "format_table", "main", "JSON_SCHEMA_VERSION", "PLAN_FLAG_FIELDS"]

JSON_SCHEMA_VERSION = 2
"""Version of ``moesim predict --json``'s layout (2: adds schema_version, moesim_version, provenance,
settings_match_measured and notes beside the predictions)."""

_PLAN_INTS = ("tp", "pp", "vpp", "ep", "etp", "dp_shard", "dp_replicate", "cp", "seq_len", "global_batch",
              "micro_batch", "deepep_sms", "routing_seed", "mtp_layers")
_PLAN_HELP = {
    "tp": "tensor-parallel degree (default 1)",
    "pp": "pipeline-parallel degree (default 1)",
    "vpp": "pipeline stages per rank for interleaved-1f1b (default 1; 2 when --pp-schedule interleaved-1f1b)",
    "ep": "expert-parallel degree (default 1: every GPU holds all experts, as TorchTitan)",
    "etp": "tensor-parallel degree inside each expert: 1 or --tp (default 1)",
    "dp_shard": "FSDP degree (default: GPUs / (dp_replicate * cp * tp * pp))",
    "dp_replicate": "replicated data-parallel (HSDP) degree (default 1)",
    "cp": "context-parallel degree (default 1)",
    "seq_len": "tokens per sequence (default 4096)",
    "global_batch": "sequences per step over all data-parallel ranks (default: 8 microbatches per rank)",
    "micro_batch": "sequences per microbatch (default 1)",
    "deepep_sms": "SMs DeepEP's kernels take (default 20)",
    "routing_seed": "seed of skewed routing (default 0)",
    "mtp_layers": "multi-token-prediction modules trained, in the last pipeline stage (default: the model's "
                  "n_mtp_layers if the stack's recipe trains MTP, else 0)",
}
#: Plan fields ``moesim predict`` takes a flag for (``compare`` variants may set these and no others).
PLAN_FLAG_FIELDS = (*_PLAN_INTS, "pp_schedule", "ac", "recompute_modules", "pp_layout", "precision", "ep_backend",
                    "routing", "expert_capacity_factor", "pad_to_capacity", "ep_rank_capacity_factor", "ep_overlap",
                    "grad_reduce_dtype", "ddp_bucket_params", "cuda_graphs", "cuda_graph_scope", "fp8_output_proj",
                    "fp8_attention", "compile_model", "cp_comm_type", "fused_grouped_mlp")
GIB = float(1 << 30)
_NIC_GBPS_MAX = 8e6  # 8 Pb/s: sim.limits.CLUSTER_BOUNDS nic_bw_bytes_per_s maximum, in Gb/s


def add_predict_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``moesim predict``'s options to ``parser`` (every number bounded by :mod:`moesim.argtypes`)."""
    g = parser.add_argument_group("what and where")
    g.add_argument("--scenario", type=non_empty, help="scenario TOML file or built-in name (e.g. dsv3-671b-b200)")
    g.add_argument("--from-torchtitan", type=non_empty, dest="from_torchtitan", metavar="JOB.toml",
                   help="plan, stack and model from a TorchTitan job config (studies.config_import)")
    g.add_argument("--from-megatron", type=non_empty, dest="from_megatron", metavar="RECIPE.yaml|ARGS",
                   help="plan and stack from a Megatron-Bridge recipe YAML or a Megatron-LM argument list")
    g.add_argument("--model", type=non_empty, help="catalog model name or model file (config.json / TOML)")
    g.add_argument("--gpu", type=non_empty, help="catalog GPU name (default: the cluster template's)")
    g.add_argument("--gpus", type=gpu_count(), help="number of GPUs")
    g.add_argument("--cluster", type=non_empty, default=None, help="cluster template or TOML (default: the GPU's first template, "
                   "e.g. hgx-b200, gb200-nvl72)")
    g.add_argument("--nic-gbps", type=finite_float(0.0, _NIC_GBPS_MAX, exclusive_minimum=True),
                   help="per-NIC line rate in Gb/s (overrides the cluster's)")
    g.add_argument("--calibration", type=non_empty, help="calibration file (moesim calibrate fit/run) or bundled name, e.g. "
                   "h800-deepseek-trace, instead of the defaults")
    g.add_argument("--stack", type=non_empty, help="framework stack profile: torchtitan | megatron | megatron-26.02 | deepseek | "
                   "a stack TOML (default: the scenario's, else torchtitan)")
    p = parser.add_argument_group("parallel plan (ParallelPlan fields)")
    for name in _PLAN_INTS:
        p.add_argument("--" + name.replace("_", "-"), type=plan_int(name), dest=name, help=_PLAN_HELP[name])
    p.add_argument("--pp-schedule", choices=PP_SCHEDULES, dest="pp_schedule", help="pipeline schedule (default 1f1b)")
    p.add_argument("--ac", choices=AC_MODES, help="activation checkpointing (default full)")
    p.add_argument("--recompute-modules", dest="recompute_modules",
                   help="with --ac selective: comma-separated Megatron modules to recompute (e.g. mla_up_proj,moe_act); "
                        "default: the stack's")
    p.add_argument("--pp-layout", dest="pp_layout",
                   help="decoder layers per model chunk, Megatron pipeline_model_parallel_layout syntax "
                        "(e.g. 'Et*4|(t*4|)*14tmL'; default: as even as possible)")
    p.add_argument("--precision", choices=PRECISIONS, help="precision recipe (default bf16)")
    p.add_argument("--grad-reduce-dtype", choices=GRAD_REDUCE_DTYPES, dest="grad_reduce_dtype",
                   help="dtype gradients accumulate and reduce in (Megatron grad_reduce_in_fp32; default: the stack's)")
    p.add_argument("--ddp-bucket-params", type=finite_float(0.0, 1e13), dest="ddp_bucket_params", metavar="N",
                   help="parameters per distributed-optimizer bucket (Megatron DDP bucket_size; 0 or at least 1e6; "
                        "default: the stack's)")
    p.add_argument("--ep-backend", choices=EP_BACKENDS, dest="ep_backend", help="all-to-all backend (default nccl)")
    p.add_argument("--ep-overlap", action="store_true", default=None, dest="ep_overlap",
                   help="Megatron combined 1F1B: overlap one microbatch's all-to-alls with another's compute")
    p.add_argument("--routing", help="balanced | round-robin | zipf:<s> | dirichlet:<alpha> | collapse:<k> (every copy "
                   "to experts 0..k-1) | tokens-per-expert file")
    p.add_argument("--expert-capacity-factor", type=finite_float(0.0, 1024.0), dest="expert_capacity_factor",
                   metavar="F", help="per-expert capacity in balanced shares (Megatron moe_expert_capacity_factor): "
                   "copies over it are dropped; 0 or at least 0.01 (default 0: dropless)")
    p.add_argument("--pad-to-capacity", action="store_true", default=None, dest="pad_to_capacity",
                   help="pad every expert to its capacity (Megatron moe_pad_expert_input_to_capacity; needs "
                        "--expert-capacity-factor)")
    p.add_argument("--ep-rank-capacity-factor", type=finite_float(0.0, 1024.0), dest="ep_rank_capacity_factor",
                   metavar="F", help="HybridEP receive budget per EP rank in balanced shares (Megatron "
                   "moe_expert_rank_capacity_factor): copies over it are dropped; 0 or at least 0.01 (default 0: none)")
    p.add_argument("--cuda-graphs", choices=CUDA_GRAPH_SCOPES, dest="cuda_graphs",
                   help="CUDA graphs of the recipe: none, partial (Transformer Engine scopes), full (full iteration); "
                        "default: the stack's launch mode")
    p.add_argument("--cuda-graph-scope", dest="cuda_graph_scope",
                   help=f"with --cuda-graphs partial: comma-separated scopes captured ({', '.join(TE_GRAPH_SCOPES)}; "
                        "default: all)")
    p.add_argument("--fp8-output-proj", action="store_true", default=None, dest="fp8_output_proj",
                   help="the output layer (LM head) in MXFP8 too (Megatron fp8_output_proj; default: BF16)")
    p.add_argument("--fp8-attention", action="store_true", default=None, dest="fp8_attention",
                   help="the attention core in FP8 (Transformer Engine fp8_dot_product_attention; needs an FP8 "
                        "precision; default: BF16)")
    p.add_argument("--fused-grouped-mlp", action="store_true", default=None, dest="fused_grouped_mlp",
                   help="the routed experts as Transformer Engine's fused grouped MLP (Megatron "
                        "use_transformer_engine_op_fuser with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1; needs --precision mxfp8; "
                        "default: TE's grouped linears)")
    p.add_argument("--cp-comm-type", choices=CP_COMM_TYPES, dest="cp_comm_type",
                   help="with --cp > 1: how context parallelism exchanges attention's inputs (Megatron cp_comm_type): "
                        "p2p (ring attention, under the attention; default) or a2a (all-to-alls around the core)")
    p.add_argument("--no-compile-model", action="store_false", default=None, dest="compile_model",
                   help="the model's blocks run eager (TorchTitan without \"model\" in compile.components); default: "
                        "a compiled stack compiles them")
    o = parser.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print one JSON object with a 'predictions' list")
    o.add_argument("--wide", action="store_true", help="exposed and hidden seconds of every communication kind")
    o.add_argument("--flops-formula", choices=("torchtitan", "megatron"), default="torchtitan", dest="flops_formula",
                   help="model FLOPs per token behind TFLOPS and MFU: TorchTitan's (default) or Megatron-Bridge's "
                        "num_floating_point_operations")
    o.add_argument("--intervals", type=non_empty, metavar="FILE", help="interval residuals file (moesim validate --write-intervals; "
                   "default: the shipped sim/data/intervals.json)")
    o.add_argument("--trace", type=non_empty, metavar="FILE", help="write a Chrome/Perfetto trace of representative ranks")
    o.add_argument("--trace-microbatches", type=trace_microbatches, default=None, metavar="I,J,...",
                   dest="trace_microbatches",
                   help="microbatches expanded to ops (compute and comm threads) in the trace (default: the first "
                        "and a steady-state window: the two middle overlapped pairs, or the middle microbatch)")


def _cluster(args: argparse.Namespace, name: str | None, gpus: int, gpu: str | None) -> ClusterSpec:
    if gpu is not None:
        from sim.catalog import gpu_names, load_gpu

        if gpu not in gpu_names():
            raise ConfigError(f"--gpu: unknown GPU {gpu!r}; the catalog has: {', '.join(gpu_names())}")
        load_gpu(gpu)
    cluster = load_cluster(name or default_cluster(gpu or "b200"), n_gpus=gpus, gpu=gpu)
    nic_gbps = getattr(args, "nic_gbps", None)
    if nic_gbps is not None:
        if not nic_gbps > 0:
            raise ConfigError(f"--nic-gbps must be positive, got {nic_gbps}")
        cluster = dataclasses.replace(cluster, nic_bw_bytes_per_s=nic_gbps * 1e9 / 8)
    return cluster


def _plan_fields(args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for name in PLAN_FLAG_FIELDS:
        v = getattr(args, name, None)
        if v is not None:
            out[name] = v
    return out


def _costs(args: argparse.Namespace, gpu: Any, stack: Any) -> tuple[Any, Any]:
    """The cost model and the stack of ``--calibration FILE`` (a :mod:`sim.calibration` file or bundled name)
    for ``gpu``, through :func:`sim.calibration.calibrated_inputs` (the path ``calibrate compare`` takes
    too); without one, the stack's own bundled calibration when it was measured on this GPU (``deepseek``
    on h800: DeepSeek's trace), else moesim's defaults (None) and the stack as it is."""
    from sim.calibration import (
        calibrated_inputs,
        default_inputs,
        load_calibration,
        stack_calibration,
    )

    own = stack_calibration(gpu, stack) if not getattr(args, "calibration", None) and stack is not None else None
    if own is not None:  # the path sim.predict takes without costs (sim.calibration.default_inputs)
        args.calibration_summary = own.summary()
        args.calibration_sd = _calibration_sd(own)
        return default_inputs(gpu, stack)
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
            return costs, stack
        args.calibration_summary = cal.summary()
        args.calibration_sd = _calibration_sd(cal)
        return calibrated_inputs(cal, gpu, stack)
    return None, stack


def _legacy_costs(path: str) -> Any:
    """A version-1 file (a serialised CostModel, ``CostModel.to_json``): still read, named as such."""
    from sim.costs import CostModel
    from sim.fileio import read_input

    raw = read_input(path, "calibration file")  # a regular file, size-bounded (sim.limits.MAX_INPUT_MB)
    data = parse_json(raw, path)  # strict JSON and bounded nesting before CostModel reads it
    for key in ("gemm_eff", "grouped_gemm_eff", "rearrange_s_per_elem", "comm", "sources"):
        table = data.get(key, {}) if isinstance(data, dict) else {}
        if not isinstance(table, dict) or (key.endswith("gemm_eff") and
                                           not all(isinstance(c, dict) for c in table.values())):
            raise ConfigError(f"{path}: malformed version-1 CostModel file: {key} must be an object"
                              + (" of {sizes, values} objects" if key.endswith("gemm_eff") else ""))
    try:
        return CostModel.from_json(raw.decode("utf-8"))
    except (ValueError, KeyError) as err:  # CostModel.from_dict's own checks; a TypeError is a bug, not input
        raise ConfigError(f"{path}: malformed version-1 CostModel file: {err}") from None


def _calibration_sd(cal: Any) -> float:
    from sim.uncertainty import calibration_sd

    return calibration_sd(cal.tables.get("residuals", {}))


def _intervals(preds: list[Any], args: argparse.Namespace, cluster: str | None = None) -> tuple[list[Any], str]:
    """p10-p90 tokens/s per GPU of every prediction (:func:`sim.uncertainty.prediction_interval`) from the
    stored residuals of the held-out measured runs of its stack (``--intervals FILE``, else the shipped
    :mod:`sim.interval_data` file) and the calibration's residuals; and a note when there are none.
    ``cluster``: the plan's cluster template, judged as its own system class when the catalog holds it (a
    user's cluster file is judged by its GPU's default template).
    An explicit ``--intervals`` file that cannot be read is a :class:`ConfigError`; a missing shipped one
    means no interval."""
    from sim import interval_data
    from sim.uncertainty import prediction_interval

    sd = getattr(args, "calibration_sd", 0.0)
    path = getattr(args, "intervals", None)
    data = interval_data.load(path) if path else interval_data.load_shipped()
    if data is None:
        return [None] * len(preds), interval_data.interval_note()
    from sim.catalog import cluster_names

    template = cluster if cluster in cluster_names() else None
    intervals = [prediction_interval(p, calibration_sd=sd, data=data, cluster=template) for p in preds]
    bare = sorted({p.stack for p, iv in zip(preds, intervals, strict=True) if iv is None})
    note = (f"no p10-p90 interval for stack {', '.join(bare)}: its framework has no held-out measured run and "
            "the calibration no residual spread, so the error is unknown" if bare else "")
    return intervals, note


def _stack(args: argparse.Namespace, scenario_stack: str = "") -> Any:
    from sim.stacks import load_stack

    return load_stack(getattr(args, "stack", None) or scenario_stack or None)


def _stack_title(stack: Any) -> str:
    return f"stack: {stack.name} ({stack.release})" if stack.release else f"stack: {stack.name}"


@dataclasses.dataclass
class _Run:
    """What one ``moesim predict`` computed and what the reader must know about it."""

    predictions: list[Any]
    title: str
    notes: list[str]
    provenance: dict[str, Any]
    comparable: list[bool]


def _notes(given: dict[str, Any], plan: dict[str, Any], model: Any, n_gpus: int) -> list[str]:
    """Visible notes for defaults that give nonsense (or that a user may not expect)."""
    notes = []
    if "ep" not in given and plan["ep"] == 1 and model.n_routed_experts > 1 and n_gpus > 1:
        notes.append(f"note: ep defaults to 1 (TorchTitan's default): each of the {n_gpus} GPUs holds all "
                     f"{model.n_routed_experts} experts of every MoE layer; pass --ep to split them")
    if plan["pp_schedule"] == "interleaved-1f1b" and "vpp" not in given and plan["pp"] > 1:
        notes.append(f"note: interleaved-1f1b without --vpp: {INTERLEAVED_DEFAULT_VPP} stages per pipeline rank "
                     "(TorchTitan's default for looped schedules)")
    return notes


def resolved_plan(plan: dict[str, Any], stack: Any, varying: tuple[str, ...] = ()) -> str:
    """The plan as it was predicted (derived degrees included), data-parallel sharding named as the stack
    does it (FSDP or ZeRO-1).

    >>> from sim.stacks import load_stack
    >>> resolved_plan({"tp": 1, "pp": 2, "pp_schedule": "1f1b", "vpp": 1, "ep": 8, "dp_shard": 32, "dp_replicate": 1,
    ...                "cp": 1, "global_batch": 256, "seq_len": 4096, "micro_batch": 1, "ac": "full",
    ...                "precision": "bf16", "ep_backend": "deepep", "ep_overlap": False}, load_stack("megatron"))
    'plan: TP 1, PP 2 (1f1b), EP 8, ZeRO-1 over 32 data-parallel ranks, global batch 256 x 4096 tokens (micro-batch 1), recompute full, bf16, deepep'
    """
    shard = "ZeRO-1" if stack.param_sharding == "zero1" else "FSDP"
    sched = plan["pp_schedule"] + (f", vpp {plan['vpp']}" if plan.get("vpp", 1) > 1 else "")
    extra = "".join(f", {k} {plan[k]}" for k in ("dp_replicate", "cp") if plan.get(k, 1) > 1)
    if plan.get("cp", 1) > 1:
        extra += f" ({plan.get('cp_comm_type', 'p2p')})"
    switches = "".join(f", {label}" for key, label in (("ep_overlap", "ep_overlap"),
                                                       ("fused_grouped_mlp", "fused grouped MLP")) if plan.get(key))
    tail = (f", {plan['precision']}, {plan['ep_backend']}{switches}" if not varying
            else f" ({' and '.join(varying)} per variant)")
    routing = "" if plan.get("routing", "balanced") == "balanced" else f", routing {plan['routing']}"
    routing += "".join(f", {label} {plan[key]:g}" for key, label in (("expert_capacity_factor", "expert capacity"),
                                                                     ("ep_rank_capacity_factor", "rank budget"))
                       if plan.get(key))
    routing += " (padded)" if plan.get("pad_to_capacity") else ""
    return (f"plan: TP {plan['tp']}, PP {plan['pp']} ({sched}), EP {plan['ep']}, {shard} over {plan['dp_shard']} "
            f"data-parallel ranks{extra}, global batch {plan['global_batch']} x {plan['seq_len']} tokens "
            f"(micro-batch {plan['micro_batch']}), recompute {plan['ac']}{tail}{routing}")


def _stack_notes(stack: Any, args: argparse.Namespace, gpu: str) -> list[str]:
    """Visible warnings: a placeholder (unfitted) stack efficiency, a calibration measured on another GPU."""
    notes = []
    if "PLACEHOLDER" in (stack.provenance or ""):
        notes.append(f"note: stack {stack.name}: its efficiency is a PLACEHOLDER (not fitted: {stack.provenance})")
    cal = getattr(args, "calibration_summary", None)
    if cal and cal.get("gpu") and cal["gpu"] != gpu:
        notes.append(f"warning: calibration {cal['name']} was measured on {cal['gpu']}; this prediction is for "
                     f"{gpu} (its kernel rates are applied to another GPU)")
    return notes


def _calibration_name(args: argparse.Namespace) -> dict[str, Any] | str:
    """What the provenance names as the kernel costs: the calibration's summary, or the built-in defaults."""
    return getattr(args, "calibration_summary", None) or "built-in defaults (sim.costs: datasheets and published " \
        "microbenchmarks)"


def _run(args: argparse.Namespace) -> tuple[list[Any], str]:
    """The predictions and the title (the older two-value form of :func:`_compute`)."""
    run = _compute(args)
    return run.predictions, run.title


def _import_config(args: argparse.Namespace) -> None:
    """``--from-torchtitan`` / ``--from-megatron``: the config's model, stack, GPU count and plan fields fill
    what the command line leaves unset (:mod:`studies.config_import`); its notes go to ``args.import_notes``."""
    tt, mg = getattr(args, "from_torchtitan", None), getattr(args, "from_megatron", None)
    if not (tt or mg):
        return
    if (tt and mg) or args.scenario:
        raise ConfigError("--from-torchtitan, --from-megatron and --scenario exclude one another")
    from studies.config_import import ignored_note, import_config, plan_fields

    cfg = import_config(str(tt or mg), "torchtitan" if tt else "megatron")
    args.model = args.model or cfg.model
    args.gpus = args.gpus or cfg.world_size
    if not args.model:
        raise ConfigError(cfg.missing_model())
    if not args.gpus:
        raise ConfigError(f"{cfg.path}: a job config does not say the GPU count; pass --gpus")
    args.stack = getattr(args, "stack", None) or cfg.stack
    for name, value in plan_fields(cfg, args.gpus, load_model(args.model), _plan_fields(args)).items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    args.import_notes = [f"plan from {cfg.framework} config {cfg.path}", *cfg.notes,
                         *([ignored_note(cfg.ignored)] if cfg.ignored else [])]


def _compute(args: argparse.Namespace) -> _Run:
    from sim.predict import predict

    _import_config(args)
    plan_args = _plan_fields(args)
    single = args.model is not None and args.scenario is None
    if single:
        if not args.gpus:
            raise ConfigError("--gpus is required with --model")
        model = load_model(args.model)
        cluster = _cluster(args, args.cluster, args.gpus, args.gpu)
        # what the stack runs where the command line leaves a field the stack lacks (DeepSeek: DeepEP, DualPipe)
        fields = derive_plan_fields({**_stack(args).defaults_for(plan_args), **plan_args}, args.gpus,
                                    "plan (command line)")
        plan = plan_from_mapping(fields, "plan (command line)")
        costs, stack = _costs(args, cluster.gpu, _stack(args))
        stack.check_plan(plan)  # a schedule, backend or precision the framework cannot run: one line, exit 2
        pred = predict(model, cluster, plan, costs, stack=stack)
        title = (f"{model.name} on {cluster.n_gpus} x {cluster.gpu.name} ({cluster.name})\n{_stack_title(stack)}\n"
                 f"{resolved_plan(pred.plan, stack)}")
        provenance = {"scenario": None, "model": model.name, "model_source": model.source, "cluster": cluster.name,
                      "gpu": cluster.gpu.name, "n_gpus": cluster.n_gpus, "calibration": _calibration_name(args),
                      "stack": stack.describe(), "overrides": plan_args}
        notes = _notes(plan_args, pred.plan, model, cluster.n_gpus) + _stack_notes(stack, args, cluster.gpu.name)
        return _Run([pred], title, notes, provenance, [False])
    sc = load_scenario(args.scenario or DEFAULT_SCENARIO)
    model = load_model(args.model or sc.model)
    gpus = args.gpus or sc.gpus
    cluster = _cluster(args, args.cluster or sc.cluster, gpus, args.gpu)
    costs, stack = _costs(args, cluster.gpu, _stack(args, sc.stack))
    preds = run_scenario(sc, model=model, cluster=cluster, costs=costs, overrides=plan_args, stack=stack)
    # What differs from the scenario as written (and so from the runs that were measured).
    changed = {k: v for k, v in (("model", args.model), ("gpus", args.gpus), ("gpu", args.gpu),
                                 ("cluster", args.cluster), ("nic_gbps", getattr(args, "nic_gbps", None)),
                                 ("stack", getattr(args, "stack", None)),
                                 ("calibration", getattr(args, "calibration", None)))
               if v is not None}
    if "stack" in changed and stack.name == _stack(argparse.Namespace(), sc.stack).name:
        changed.pop("stack")
    if "model" in changed and model.name == load_model(sc.model).name:
        changed.pop("model")
    if changed.get("gpus") == sc.gpus:
        changed.pop("gpus")
    comparable = []
    for variant, pred in zip(sc.variants, preds, strict=True):
        as_written = plan_from_mapping(derive_plan_fields({**sc.base, **variant.plan}, sc.gpus), "scenario")
        same = not changed and as_written.as_dict() == pred.plan
        comparable.append(same)
        if not same:
            pred.measured_tokens_per_s_per_gpu = None
    overrides = {**changed, **plan_args}
    shown = ", ".join(f"{k}={v}" for k, v in overrides.items())
    where = f"{model.name} on {cluster.n_gpus} x {cluster.gpu.name} ({cluster.name})"
    if not overrides:
        title = f"{sc.name}: {sc.description}".strip(": ")
    else:
        title = f"{sc.name} modified ({shown}): {where}"
    title += "\n" + _stack_title(stack)
    varied = ("precision", "ep_backend", "ep_overlap")
    common = {json.dumps({k: v for k, v in p.plan.items() if k not in varied}, sort_keys=True) for p in preds}
    if len({json.dumps(p.plan, sort_keys=True) for p in preds}) == 1:
        title += "\n" + resolved_plan(preds[0].plan, stack)
    elif len(common) == 1:
        title += "\n" + resolved_plan(preds[0].plan, stack, ("precision", "all-to-all backend"))
    else:
        title += "\n" + "\n".join(f"{p.name}: {resolved_plan(p.plan, stack)}" for p in preds)
    notes = []
    if overrides and not all(comparable):
        notes.append(f"note: settings differ from the measured runs ({shown}): measured columns dropped")
    for variant, pred in zip(sc.variants, preds, strict=True):
        given = {**sc.base, **variant.plan, **plan_args}
        for note in _notes(given, pred.plan, model, cluster.n_gpus):
            if note not in notes:
                notes.append(note)
    notes.extend(_stack_notes(stack, args, cluster.gpu.name))
    provenance = {"scenario": sc.name, "model": model.name, "model_source": model.source, "cluster": cluster.name,
                  "gpu": cluster.gpu.name, "n_gpus": cluster.n_gpus, "calibration": _calibration_name(args),
                  "stack": stack.describe(), "overrides": overrides,
                  "fitted_variants": [v.name for v in sc.variants if v.fitted]}
    for variant, pred, same in zip(sc.variants, preds, comparable, strict=True):
        if variant.fitted and same:  # fitted at the scenario's settings only
            pred.name = f"{pred.name} [fitted]"
    return _Run(preds, title, notes, provenance, comparable)


_GROUPS = (("compute", ("compute.",)), ("a2a", ("comm.a2a",)), ("other comm", ("comm.",)),
           ("bubble", ("pipeline_bubble",)), ("other", ("",)))


def breakdown_groups(breakdown: dict[str, float]) -> dict[str, float]:
    """The step-time breakdown folded into the table's columns (each key in the first group it matches).

    >>> breakdown_groups({"compute.attn.core": 1.0, "comm.a2a": 2.0, "comm.tp": 0.5, "host_sync": 0.1})
    {'compute': 1.0, 'a2a': 2.0, 'other comm': 0.5, 'bubble': 0.0, 'other': 0.1}
    """
    out = dict.fromkeys((g for g, _ in _GROUPS), 0.0)
    for key, seconds in breakdown.items():
        group = next(g for g, prefixes in _GROUPS if any(key.startswith(p) for p in prefixes))
        out[group] += seconds
    return out


def _comm_kinds(preds: list[Any]) -> list[str]:
    kinds = {k for p in preds for k in p.breakdown if k.startswith("comm.") or k == "host_sync"}
    kinds |= {k for p in preds for k in p.hidden_comm}
    return sorted(kinds)


def format_table(preds: list[Any], title: str = "", notes: list[str] | None = None, *, wide: bool = False,
                 flops_formula: str = "torchtitan") -> str:
    """Predicted vs measured, speedups vs the first row, the step breakdown (``a2a s``: exposed all-to-all;
    ``a2a hidden s``: all-to-all under compute), MFU and memory (GiB); ``wide``: exposed and hidden seconds
    of every communication kind, and per op kind its GB per step and achieved GB/s with what bounds it."""
    kinds = _comm_kinds(preds) if wide else []
    ops_ = sorted({k for p in preds for k in getattr(p, "comm", {})}) if wide else []
    headers = ["variant", "tok/s/GPU", "measured", "error", "speedup", "meas. speedup", "step s",
               *(f"{g} s" for g, _ in _GROUPS), "a2a hidden s",
               *(h for k in kinds for h in (f"{k} exposed s", f"{k} hidden s")),
               *(f"{k} GB@GB/s" for k in ops_), "TFLOPS", "MFU", "mem GiB", "fits"]
    base = preds[0]
    rows = []
    for p in preds:
        meas = p.measured_tokens_per_s_per_gpu
        fitted = p.name.endswith("[fitted]")
        err = "(fitted)" if fitted and meas else f"{(p.tokens_per_s_per_gpu / meas - 1) * 100:+.1f}%" if meas else "-"
        sp = "-" if p is base else f"{(p.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu - 1) * 100:+.1f}%"
        msp = f"{(meas / base.measured_tokens_per_s_per_gpu - 1) * 100:+.0f}%" if (
            meas and base.measured_tokens_per_s_per_gpu and p is not base) else "-"
        tput = f"{p.tokens_per_s_per_gpu:.1f}" if p.fits_in_memory else f"{p.tokens_per_s_per_gpu:.1f} (does not fit)"
        groups = breakdown_groups(p.breakdown)
        rows.append([p.name, tput, f"{meas:g}" if meas else "-", err, sp, msp, f"{p.step_time_s:.1f}",
                     *(f"{groups[g]:.1f}" for g, _ in _GROUPS), f"{p.hidden_comm.get('comm.a2a', 0.0):.1f}",
                     *(v for k in kinds for v in (f"{p.breakdown.get(k, 0.0):.2f}", f"{p.hidden_comm.get(k, 0.0):.2f}")),
                     *(_comm_cell(p.comm.get(k)) for k in ops_),
                     f"{p.tflops_per_gpu:.1f}", f"{p.mfu * 100:.1f}%",
                     f"{p.peak_memory_bytes / GIB:.1f} / {p.memory_capacity_bytes / GIB:.0f}",
                     "yes" if p.fits_in_memory else "NO: does not fit in memory"])
    all_notes = list(notes or [])
    if any(p.name.endswith("[fitted]") for p in preds):
        all_notes.append("[fitted]: the scenario marks this run as the one a number was fitted to; "
                         "its error is 0 by construction, not a prediction")
    for p in preds:
        total = sum(p.breakdown.values())
        if abs(total - p.step_time_s) > 0.01 * p.step_time_s:
            all_notes.append(f"warning: {p.name}: the breakdown sums to {total:.1f} s, not the step's "
                             f"{p.step_time_s:.1f} s (overlapped time counted in several columns)")
    formula = "Megatron-Bridge formula" if flops_formula == "megatron" else "TorchTitan formula; --flops-formula megatron"
    all_notes.append(f"MFU: model FLOPs ({formula}) / the GPU's dense BF16 peak; memory: peak per GPU / HBM "
                     "in GiB (2^30 bytes, as TorchTitan logs it)")
    return render_table(headers, rows, title=title, notes=all_notes).rstrip("\n")


def run_predict(args: argparse.Namespace) -> int:
    """Run ``moesim predict``; returns the exit code (2 and one message on a user error)."""
    try:
        if getattr(args, "trace_microbatches", None) is not None and not getattr(args, "trace", None):
            raise ConfigError("--trace-microbatches picks the microbatches of a trace: give --trace FILE with it")
        run = _compute(args)
        run.notes[:0] = getattr(args, "import_notes", [])
        if getattr(args, "trace", None):
            from sim.trace import write_chrome_trace

            write_chrome_trace(run.predictions, args.trace, microbatches=getattr(args, "trace_microbatches", None))
            run.notes.extend(_trace_notes(run.predictions, args.trace, getattr(args, "trace_microbatches", None)))
        intervals, interval_note = _intervals(run.predictions, args, run.provenance.get("cluster"))
        _apply_flops_formula(run.predictions, getattr(args, "flops_formula", "torchtitan"))
    except MoesimError as err:
        print(f"moesim predict: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"moesim predict: error: {getattr(err, 'filename', '') or ''}{': ' if getattr(err, 'filename', None) else ''}"
              f"{err.strerror or err}", file=sys.stderr)
        return 2
    if getattr(args, "json", False):
        from moesim import __version__

        print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, "moesim_version": __version__,
                          "title": run.title, "provenance": run.provenance, "notes": run.notes,
                          "settings_match_measured": run.comparable,
                          "calibration": getattr(args, "calibration_summary", None),
                          "interval_note": interval_note or None,
                          "flops_formula": getattr(args, "flops_formula", "torchtitan"),
                          "predictions": [{**p.to_dict(), "interval": iv.to_dict() if iv else None,
                                           "evidence": iv.evidence if iv else None}
                                          for p, iv in zip(run.predictions, intervals, strict=True)]}, indent=2, allow_nan=False))
    else:
        print(format_table(run.predictions, run.title, run.notes, wide=getattr(args, "wide", False),
                           flops_formula=getattr(args, "flops_formula", "torchtitan")))
        cal = getattr(args, "calibration_summary", None)
        print(f"calibration: {cal['name']} ({cal['path']}; {cal['gpu']}, {cal['method']}; sources: "
              f"{'; '.join(cal['sources'])})" if cal else "calibration: moesim defaults (datasheets and published "
              "microbenchmarks, sim.costs)")
        if interval_note:
            print(interval_note)
        for p, iv in zip(run.predictions, intervals, strict=True):
            if iv is not None:
                print(f"  {p.name}: {format_interval(iv)}")
                if iv.evidence:
                    from sim.uncertainty import format_evidence

                    print(f"  {p.name}: {format_evidence(iv.evidence)}")
        for p in run.predictions:
            print(f"  {p.name}: {format_bound(p)}")
    return 0


def _comm_cell(entry: dict[str, Any] | None) -> str:
    """``GB per step@GB/s bound_by/link`` of one communication kind, the bytes that cross its link and their rate
    while it runs, e.g. ``1966@46.8 nic/rdma``."""
    if not entry:
        return "-"
    return f"{entry['link_bytes_per_step'] / 1e9:.0f}@{entry['link_gbps']:.1f} {entry['bound_by']}/{entry['link']}"


def format_bound(p: Any, top: int = 3) -> str:
    """One line: what bounds the step (``Prediction.bottleneck``) and, for the ``top`` communication kinds by
    busy seconds, the bytes per step that cross their link, the link, the rate while they run and the limiter
    (``Prediction.comm``).

    >>> from types import SimpleNamespace as NS
    >>> format_bound(NS(bottleneck="compute", bottleneck_share=0.55, comm={"moe.dispatch": {
    ...     "bytes_per_step": 2.6e12, "link": "rdma", "achieved_gbps": 62.3, "bound_by": "nic", "busy_s": 42.1,
    ...     "link_bytes_per_step": 1.95e12, "link_gbps": 46.7}}))
    'bound by: compute (55% of the step); moe.dispatch nic-bound (1950 GB/step over rdma at 46.7 GB/s)'
    """
    kinds = sorted(p.comm.items(), key=lambda kv: -kv[1].get("busy_s", 0.0))[:top]
    comm = "".join(f"; {k} {v['bound_by']}-bound ({v['link_bytes_per_step'] / 1e9:.0f} GB/step over {v['link']} at "
                   f"{v['link_gbps']:.1f} GB/s)" for k, v in kinds)
    return f"bound by: {p.bottleneck} ({p.bottleneck_share:.0%} of the step){comm}"


def _apply_flops_formula(preds: list[Any], formula: str) -> None:
    """Recompute TFLOPS and MFU of ``preds`` with ``formula`` (:mod:`sim.flops`; the step is unchanged)."""
    if formula == "torchtitan":
        return
    from sim.catalog import load_gpu
    from sim.flops import flops_per_token

    for p in preds:
        model = load_model(p.model)
        flops = flops_per_token(model, p.plan["seq_len"], formula) * p.tokens_per_s_per_gpu
        p.tflops_per_gpu = flops / 1e12
        p.mfu = flops / load_gpu(p.gpu).bf16_flops


def _trace_notes(preds: list[Any], path: str, microbatches: Any) -> list[str]:
    """One line per prediction: the expanded window, and the share of its communication under compute as the
    trace shows it and as the prediction accounts it."""
    from sim.trace import (
        chrome_trace_events,
        default_window,
        predicted_hidden_share,
        trace_hidden_share,
    )

    out = []
    for p in preds:
        window = tuple(microbatches) if microbatches is not None else default_window(p)
        shown = trace_hidden_share(chrome_trace_events(p, microbatches=window))
        out.append(f"trace {path}: {p.name}: microbatches {', '.join(map(str, window))} expanded to ops; "
                   f"{shown * 100:.0f}% of their communication runs under compute (prediction: "
                   f"{predicted_hidden_share(p, window) * 100:.0f}%)")
    return out


def format_interval(iv: Any) -> str:
    """One line: the interval around the (unshifted) prediction, what it is built from, and whether a run's
    own residual was left out.

    >>> from sim.uncertainty import interval
    >>> format_interval(interval(100.0, [0.1, 0.2, 0.3], stack="megatron", left_out="r1"))
    'p10-p90 98.2 - 151.9 tokens/s/GPU around the prediction 100.0 (stack megatron, 3 held-out measured runs, measured/predicted mean +22.1%; own residual of r1 left out)'
    """
    import math

    if iv.n_runs:
        runs = (f"{iv.n_runs} held-out measured run{'s' if iv.n_runs != 1 else ''}, measured/predicted mean "
                f"{(math.exp(iv.mean_log_residual) - 1) * 100:+.1f}%")
    else:
        runs = "no held-out measured run: calibration spread only"
    left = f"; own residual of {iv.left_out} left out" if iv.left_out else ""
    return (f"p10-p90 {iv.p10:.1f} - {iv.p90:.1f} tokens/s/GPU around the prediction {iv.point:.1f} "
            f"(stack {iv.stack}, {runs}{left})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="moesim predict", description=__doc__.splitlines()[0])
    add_predict_arguments(parser)
    return run_predict(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
