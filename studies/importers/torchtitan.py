"""TorchTitan job configs (the TOML of ``train_configs/*.toml``) in moesim's terms: ``[model]`` name and
flavor, ``[training]`` batch and sequence, ``[parallelism]`` degrees, schedule and all-to-all backend
(``expert_parallel_comm_backend``), ``[activation_checkpoint]``, ``[compile]``, the MXFP8 converters of both
eras (``mx`` with ``moe_fqns_prototype``; ``quantize.linear.mx`` / ``quantize.grouped_mm.mx``) and
``[debug] moe_force_load_balance``."""

from __future__ import annotations

import math
from typing import Any

from sim.errors import ConfigError
from sim.loaders import read_toml
from studies.importers.common import (
    ImportedConfig,
    Keys,
    bool_value,
    int_value,
    str_list,
)

__all__ = ["TITAN_BACKENDS", "TITAN_FLAVORS", "TITAN_SCHEDULES", "from_torchtitan"]

#: TorchTitan ``[model] name`` and ``flavor`` -> catalog model.
TITAN_FLAVORS = {
    ("deepseek_v3", "671B"): "deepseek-v3-671b",
    ("deepseek_v3", "16B"): "deepseek-v3-16b",
}
#: TorchTitan ``pipeline_parallel_schedule`` -> moesim schedule (others cannot be simulated).
TITAN_SCHEDULES = {"1F1B": "1f1b", "Interleaved1F1B": "interleaved-1f1b", "DualPipeV": "dualpipev"}
#: TorchTitan ``expert_parallel_comm_backend`` -> moesim ``ep_backend``.
TITAN_BACKENDS = {"standard": "nccl", "deepep": "deepep", "hybridep": "hybridep"}
#: stages per rank of a looped schedule when no ``pipeline_parallel_layers_per_stage`` is given.
TITAN_DEFAULT_STAGES_PER_RANK = 2


def _titan_precision(keys: Keys) -> str:
    """The precision recipe of ``[model] converters`` and its quantisation sections (both eras: ``mx`` /
    ``float8`` with ``moe_fqns_prototype``, and ``quantize.linear.*`` / ``quantize.grouped_mm.*``)."""
    converters = str_list(keys, "model.converters", keys.get("model.converters", []))
    grouped_mx = linear_mx = False
    for conv in converters:
        if conv == "quantize.grouped_mm.mx":
            recipe = keys.text("quantize.grouped_mm.mx.recipe_name", "mxfp8")
            fqns = str_list(keys, "quantize.grouped_mm.mx.fqns", keys.get("quantize.grouped_mm.mx.fqns", []))
            if recipe != "mxfp8":
                raise keys.fail("quantize.grouped_mm.mx.recipe_name", recipe, "moesim simulates the mxfp8 recipe only")
            if "experts" not in fqns:
                raise keys.fail("quantize.grouped_mm.mx.fqns", fqns, "moesim quantises the routed experts "
                                "(fqns = [\"experts\"]) or nothing")
            grouped_mx = True
        elif conv in ("quantize.linear.mx", "mx"):
            section = "quantize.linear.mx" if conv != "mx" else "mx"
            recipe = keys.text(f"{section}.recipe_name", "mxfp8")
            if not str(recipe).startswith("mxfp8"):
                raise keys.fail(f"{section}.recipe_name", recipe, "moesim simulates MXFP8 (mxfp8*) recipes only")
            keys.get(f"{section}.filter_fqns")
            keys.get(f"{section}.mxfp8_dim1_cast_kernel_choice")
            linear_mx = True
            if conv == "mx" and str_list(keys, "mx.moe_fqns_prototype", keys.get("mx.moe_fqns_prototype", [])):
                grouped_mx = True
        elif conv in ("float8", "quantize.linear.float8", "quantize.grouped_mm.float8"):
            raise keys.fail("model.converters", converters, f"TorchTitan's {conv} (torchao Float8 tensorwise/rowwise) "
                            "is no moesim precision (bf16, mxfp8-grouped, mxfp8, fp8-blockwise, fp8-current)")
        else:
            raise keys.fail("model.converters", converters, f"unknown converter {conv!r}")
    if linear_mx and grouped_mx:
        return "mxfp8"
    if grouped_mx:
        return "mxfp8-grouped"
    if linear_mx:
        raise keys.fail("model.converters", converters, "MXFP8 on the dense linears but not the routed experts has "
                        "no moesim precision (mxfp8 = every linear, mxfp8-grouped = routed experts)")
    return "bf16"


def from_torchtitan(path: str) -> ImportedConfig:
    """Read the TorchTitan job TOML at ``path`` (ConfigError on a value moesim cannot express)."""
    keys = Keys(path, read_toml(path))
    notes: list[str] = []
    name, flavor = keys.text("model.name"), keys.text("model.flavor")
    model = TITAN_FLAVORS.get((name, flavor)) if name is not None and flavor is not None else None
    if name is not None and model is None:
        known = ", ".join(f"{n} {f}" for n, f in TITAN_FLAVORS)
        raise keys.fail("model.flavor", f"{name} {flavor}", f"no catalog model for this TorchTitan model and flavor "
                        f"(known: {known}); pass --model")
    f: dict[str, Any] = {}
    p = "parallelism."
    for key, field in (("tensor_parallel_degree", "tp"), ("pipeline_parallel_degree", "pp"),
                       ("expert_parallel_degree", "ep"), ("expert_tensor_parallel_degree", "etp"),
                       ("context_parallel_degree", "cp"), ("data_parallel_replicate_degree", "dp_replicate"),
                       ("pipeline_parallel_microbatch_size", "micro_batch")):
        if keys.has(p + key):
            f[field] = int_value(keys, p + key, keys.get(p + key))
    shard = keys.get(p + "data_parallel_shard_degree", -1)
    if shard != -1:
        f["dp_shard"] = int_value(keys, p + "data_parallel_shard_degree", shard)
    pp = f.get("pp", 1)
    layers_per_stage = None
    sched_name = keys.text(p + "pipeline_parallel_schedule", "1F1B")
    if pp > 1:
        if sched_name not in TITAN_SCHEDULES:
            raise keys.fail(p + "pipeline_parallel_schedule", sched_name,
                            f"moesim simulates {', '.join(TITAN_SCHEDULES)}")
        f["pp_schedule"] = TITAN_SCHEDULES[sched_name]
        lps = keys.get(p + "pipeline_parallel_layers_per_stage")
        if lps is not None:
            layers_per_stage = (int_value(keys, p + "pipeline_parallel_layers_per_stage", lps),
                                int_value(keys, p + "pipeline_parallel_first_stage_less_layers",
                                     keys.get(p + "pipeline_parallel_first_stage_less_layers", 1), minimum=0),
                                int_value(keys, p + "pipeline_parallel_last_stage_less_layers",
                                     keys.get(p + "pipeline_parallel_last_stage_less_layers", 1), minimum=0))
        elif f["pp_schedule"] == "interleaved-1f1b":
            f["vpp"] = TITAN_DEFAULT_STAGES_PER_RANK
    backend = keys.text(p + "expert_parallel_comm_backend", "standard")
    if backend not in TITAN_BACKENDS:
        raise keys.fail(p + "expert_parallel_comm_backend", backend, f"moesim knows {', '.join(TITAN_BACKENDS)}")
    f["ep_backend"] = TITAN_BACKENDS[backend]
    t = "training."
    local = keys.get(t + "local_batch_size", keys.get(t + "batch_size"))
    local_batch = int_value(keys, t + "local_batch_size", local) if local is not None else None
    gbs = keys.get(t + "global_batch_size", -1)
    if gbs != -1:
        f["global_batch"] = int_value(keys, t + "global_batch_size", gbs)
    elif local_batch is None:
        raise ConfigError(f"{path}: training.local_batch_size (or global_batch_size) is required")
    if keys.has(t + "seq_len"):
        f["seq_len"] = int_value(keys, t + "seq_len", keys.get(t + "seq_len"))
    keys.get(t + "steps")
    param_dtype = keys.text(t + "mixed_precision_param", "bfloat16")
    if param_dtype != "bfloat16":
        raise keys.fail(t + "mixed_precision_param", param_dtype, "moesim simulates bfloat16 parameters in compute")
    reduce = keys.text(t + "mixed_precision_reduce")
    if reduce is not None:
        dtypes = {"float32": "fp32", "bfloat16": "bf16"}
        if reduce not in dtypes:
            raise keys.fail(t + "mixed_precision_reduce", reduce, "must be float32 or bfloat16")
        f["grad_reduce_dtype"] = dtypes[reduce]
    mode = keys.text("activation_checkpoint.mode", "selective")
    if mode not in ("full", "selective", "none"):
        raise keys.fail("activation_checkpoint.mode", mode, "must be full, selective or none")
    f["ac"] = mode
    if mode == "selective":
        option = keys.get("activation_checkpoint.selective_ac_option", "2")
        notes.append(f"note: activation_checkpoint.mode selective (selective_ac_option {option!r}) is simulated as "
                     "the stack's selective recompute, not op by op")
    f["precision"] = _titan_precision(keys)
    compiled = bool_value(keys, "compile.enable", keys.get("compile.enable", False))
    components = str_list(keys, "compile.components", keys.get("compile.components", ["model", "loss"]))
    if not (compiled and "model" in components):
        f["compile_model"] = False
        notes.append("note: the model is not compiled (compile.enable / compile.components): its blocks launch "
                     "eagerly (compile_model false); the elementwise fusion torch.compile adds is not modelled")
    balanced = bool_value(keys, "debug.moe_force_load_balance", keys.get("debug.moe_force_load_balance", False))
    f["routing"] = "balanced"
    if not balanced:
        notes.append("note: debug.moe_force_load_balance is off: routing is simulated balanced (pass --routing "
                     "zipf:<s> or a tokens-per-expert file for a skew, or collapse:<experts per EP rank> for the "
                     "slowest the plan's token capacities allow)")
    world = None
    if "dp_shard" in f:
        world = math.prod(f.get(k, 1) for k in ("dp_shard", "dp_replicate", "cp", "tp", "pp"))
    return ImportedConfig(path=path, framework="torchtitan", stack="torchtitan", model=model, fields=f,
                          notes=tuple(notes), ignored=keys.ignored(), world_size=world, local_batch=local_batch,
                          layers_per_stage=layers_per_stage)

