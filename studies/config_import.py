"""Framework job configs in: a TorchTitan job TOML, a Megatron-Bridge recipe YAML or a Megatron-LM argument
list, translated into a moesim model, stack and :class:`~sim.specs.ParallelPlan` fields.

A job config says how the work is split, not on how many GPUs: the GPU count comes from the caller
(``moesim predict --gpus``) unless every data-parallel degree of a TorchTitan config is explicit. Every key
the translation does not read is listed in :attr:`ImportedConfig.ignored` (a section none of whose keys is
read is listed once, as ``section.*``); a value moesim cannot express raises :class:`~sim.errors.ConfigError`
naming the key and the value.

>>> megatron_layout(n_layers=2, pp=2, vpp=2, embedding=True, loss=True)
'E|(t|)*2L'
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.catalog import load_model, model_names
from sim.errors import ConfigError
from sim.fileio import read_input
from sim.loaders import derive_plan_fields, read_toml
from sim.specs import ModelSpec, ParallelPlan

__all__ = ["FRAMEWORKS", "ImportedConfig", "ignored_note", "import_config", "megatron_layout", "plan_fields"]

FRAMEWORKS = ("torchtitan", "megatron")

#: TorchTitan ``[model] name`` and ``flavor`` -> catalog model.
TITAN_FLAVORS = {
    ("deepseek_v3", "671B"): "deepseek-v3-671b",
    ("deepseek_v3", "16B"): "deepseek-v3-16b",
}
#: TorchTitan ``pipeline_parallel_schedule`` -> moesim schedule (others cannot be simulated).
TITAN_SCHEDULES = {"1F1B": "1f1b", "Interleaved1F1B": "interleaved-1f1b", "DualPipeV": "dualpipev"}
TITAN_SINGLE_STAGE = ("1F1B",)
#: TorchTitan ``expert_parallel_comm_backend`` -> moesim ``ep_backend``.
TITAN_BACKENDS = {"standard": "nccl", "deepep": "deepep", "hybridep": "hybridep"}
#: stages per rank of a looped schedule when no ``pipeline_parallel_layers_per_stage`` is given.
TITAN_DEFAULT_STAGES_PER_RANK = 2

#: Megatron ``fp8_recipe`` (with an fp8 format set) -> moesim precision.
MEGATRON_FP8_RECIPES = {"mxfp8": "mxfp8", "blockwise": "fp8-blockwise", "tensorwise": "fp8-current"}
#: Megatron-Bridge ``mixed_precision`` recipe names -> moesim precision.
MEGATRON_MIXED_PRECISION = {
    "bf16_mixed": "bf16",
    "bf16_with_mxfp8_mixed": "mxfp8",
    "bf16_with_fp8_current_scaling_mixed": "fp8-current",
    "bf16_with_fp8_subchannel_scaling_mixed": "fp8-blockwise",
}
#: Megatron-LM argument names that say what a Megatron-Bridge YAML key says.
MEGATRON_ALIASES = {
    "fp8_format": "fp8",
    "num_virtual_stages_per_pipeline_rank": "virtual_pipeline_model_parallel_size",
    "num_experts": "num_moe_experts",
    "encoder_seq_length": "seq_length",
}
#: Megatron keys that identify the model, and the ModelSpec field each must equal.
MEGATRON_SHAPE = {"num_layers": "n_layers", "hidden_size": "dim", "num_moe_experts": "n_routed_experts",
                  "moe_ffn_hidden_size": "moe_inter_dim", "num_attention_heads": "n_heads"}


@dataclasses.dataclass(frozen=True)
class ImportedConfig:
    """What a framework config says, in moesim's terms.

    ``fields`` are plan fields that do not depend on the GPU count; :func:`plan_fields` completes them
    (data-parallel degrees, a TorchTitan global batch from its per-rank batch, a Megatron layout from its
    pipeline-split flags) for a GPU count and model.
    """

    path: str
    framework: str
    stack: str
    model: str | None
    fields: Mapping[str, Any]
    notes: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    #: GPUs the config itself implies (TorchTitan with every degree explicit), else None
    world_size: int | None = None
    #: TorchTitan ``local_batch_size`` when the global batch follows from it (``global_batch_size = -1``)
    local_batch: int | None = None
    #: TorchTitan ``pipeline_parallel_layers_per_stage`` (and the first/last stage weights): vpp follows
    #: from the model's layer count
    layers_per_stage: tuple[int, int, int] | None = None
    #: Megatron pipeline split: embedding/loss accounted as layers, first/last stage decoder layers
    split: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: Megatron ``num_layers_per_virtual_pipeline_stage``
    layers_per_virtual_stage: int | None = None
    #: architecture keys the config gives: key path -> (ModelSpec field, value); the model must agree
    shape: Mapping[str, tuple[str, Any]] = dataclasses.field(default_factory=dict)

    def missing_model(self) -> str:
        """Why the config names no catalog model (the error when the caller gives none either)."""
        if not self.shape:
            return f"{self.path}: names no catalog model; pass --model"
        shown = ", ".join(f"{k} = {v}" for k, (_, v) in self.shape.items())
        return f"{self.path}: {shown} match no single catalog model; pass --model"

    def check_model(self, model: ModelSpec) -> None:
        """Refuse ``model`` when the config's architecture keys disagree with it."""
        for path, (field, value) in self.shape.items():
            if getattr(model, field) != value:
                raise ConfigError(f"{self.path}: {path} = {value!r}, but model {model.name} has {field} "
                                  f"{getattr(model, field)!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "framework": self.framework, "stack": self.stack, "model": self.model,
                "fields": dict(self.fields), "notes": list(self.notes), "ignored": list(self.ignored)}


def ignored_note(ignored: tuple[str, ...] | list[str]) -> str:
    """The one line that lists the keys a translation did not read.

    >>> ignored_note(["job.*", "training.max_norm"])
    'ignored keys: job.*, training.max_norm'
    """
    return "ignored keys: " + ", ".join(ignored)


class _Keys:
    """A flat view of a nested config: ``section.key`` -> value, remembering which keys were read."""

    def __init__(self, where: str, data: Mapping[str, Any]) -> None:
        self.where = where
        self.flat: dict[str, Any] = {}
        self.used: set[str] = set()
        self._flatten("", data)

    def _flatten(self, prefix: str, data: Mapping[str, Any]) -> None:
        for key, value in data.items():
            if str(key).startswith("_"):  # Hydra/OmegaConf metadata such as _target_
                continue
            path = f"{prefix}{key}"
            if isinstance(value, Mapping) and value:
                self._flatten(path + ".", value)
            else:
                self.flat[path] = value

    def get(self, path: str, default: Any = None) -> Any:
        if path in self.flat:
            self.used.add(path)
            return self.flat[path]
        return default

    def has(self, path: str) -> bool:
        return path in self.flat

    def fail(self, path: str, value: Any, why: str) -> ConfigError:
        return ConfigError(f"{self.where}: {path} = {value!r}: {why}")

    def ignored(self) -> tuple[str, ...]:
        """Unread keys; a section none of whose keys was read is named once as ``section.*``."""
        unread = [k for k in self.flat if k not in self.used]
        out: list[str] = []
        for key in sorted(unread):
            parts = key.split(".")
            section = next((".".join(parts[:i]) for i in range(1, len(parts))
                            if not any(u == ".".join(parts[:i]) or u.startswith(".".join(parts[:i]) + ".")
                                       for u in self.used)), None)
            name = f"{section}.*" if section else key
            if name not in out:
                out.append(name)
        return tuple(out)


def _int(keys: _Keys, path: str, value: Any, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise keys.fail(path, value, f"must be an integer >= {minimum}")
    return value


def _bool(keys: _Keys, path: str, value: Any) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise keys.fail(path, value, "must be true or false")
    return value


def _str_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.replace(" ", ",").split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return []


# --- TorchTitan ------------------------------------------------------------------------------------------


def _titan_precision(keys: _Keys) -> str:
    """The precision recipe of ``[model] converters`` and its quantisation sections (both eras: ``mx`` /
    ``float8`` with ``moe_fqns_prototype``, and ``quantize.linear.*`` / ``quantize.grouped_mm.*``)."""
    converters = _str_list(keys.get("model.converters", []))
    grouped_mx = linear_mx = False
    for conv in converters:
        if conv == "quantize.grouped_mm.mx":
            recipe = keys.get("quantize.grouped_mm.mx.recipe_name", "mxfp8")
            fqns = _str_list(keys.get("quantize.grouped_mm.mx.fqns", []))
            if recipe != "mxfp8":
                raise keys.fail("quantize.grouped_mm.mx.recipe_name", recipe, "moesim simulates the mxfp8 recipe only")
            if "experts" not in fqns:
                raise keys.fail("quantize.grouped_mm.mx.fqns", fqns, "moesim quantises the routed experts "
                                "(fqns = [\"experts\"]) or nothing")
            grouped_mx = True
        elif conv in ("quantize.linear.mx", "mx"):
            section = "quantize.linear.mx" if conv != "mx" else "mx"
            recipe = keys.get(f"{section}.recipe_name", "mxfp8")
            if not str(recipe).startswith("mxfp8"):
                raise keys.fail(f"{section}.recipe_name", recipe, "moesim simulates MXFP8 (mxfp8*) recipes only")
            keys.get(f"{section}.filter_fqns")
            keys.get(f"{section}.mxfp8_dim1_cast_kernel_choice")
            linear_mx = True
            if conv == "mx" and _str_list(keys.get("mx.moe_fqns_prototype", [])):
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


def _from_titan(path: str) -> ImportedConfig:
    keys = _Keys(path, read_toml(path))
    notes: list[str] = []
    name, flavor = keys.get("model.name"), keys.get("model.flavor")
    model = TITAN_FLAVORS.get((name, flavor))
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
            f[field] = _int(keys, p + key, keys.get(p + key))
    shard = keys.get(p + "data_parallel_shard_degree", -1)
    if shard != -1:
        f["dp_shard"] = _int(keys, p + "data_parallel_shard_degree", shard)
    pp = f.get("pp", 1)
    layers_per_stage = None
    sched_name = keys.get(p + "pipeline_parallel_schedule", "1F1B")
    if pp > 1:
        if sched_name not in TITAN_SCHEDULES:
            raise keys.fail(p + "pipeline_parallel_schedule", sched_name,
                            f"moesim simulates {', '.join(TITAN_SCHEDULES)}")
        f["pp_schedule"] = TITAN_SCHEDULES[sched_name]
        lps = keys.get(p + "pipeline_parallel_layers_per_stage")
        if lps is not None:
            layers_per_stage = (_int(keys, p + "pipeline_parallel_layers_per_stage", lps),
                                _int(keys, p + "pipeline_parallel_first_stage_less_layers",
                                     keys.get(p + "pipeline_parallel_first_stage_less_layers", 1), minimum=0),
                                _int(keys, p + "pipeline_parallel_last_stage_less_layers",
                                     keys.get(p + "pipeline_parallel_last_stage_less_layers", 1), minimum=0))
        elif f["pp_schedule"] == "interleaved-1f1b":
            f["vpp"] = TITAN_DEFAULT_STAGES_PER_RANK
    backend = keys.get(p + "expert_parallel_comm_backend", "standard")
    if backend not in TITAN_BACKENDS:
        raise keys.fail(p + "expert_parallel_comm_backend", backend, f"moesim knows {', '.join(TITAN_BACKENDS)}")
    f["ep_backend"] = TITAN_BACKENDS[backend]
    t = "training."
    local = keys.get(t + "local_batch_size", keys.get(t + "batch_size"))
    local_batch = _int(keys, t + "local_batch_size", local) if local is not None else None
    gbs = keys.get(t + "global_batch_size", -1)
    if gbs != -1:
        f["global_batch"] = _int(keys, t + "global_batch_size", gbs)
    elif local_batch is None:
        raise ConfigError(f"{path}: training.local_batch_size (or global_batch_size) is required")
    if keys.has(t + "seq_len"):
        f["seq_len"] = _int(keys, t + "seq_len", keys.get(t + "seq_len"))
    keys.get(t + "steps")
    param_dtype = keys.get(t + "mixed_precision_param", "bfloat16")
    if param_dtype != "bfloat16":
        raise keys.fail(t + "mixed_precision_param", param_dtype, "moesim simulates bfloat16 parameters in compute")
    reduce = keys.get(t + "mixed_precision_reduce")
    if reduce is not None:
        dtypes = {"float32": "fp32", "bfloat16": "bf16"}
        if reduce not in dtypes:
            raise keys.fail(t + "mixed_precision_reduce", reduce, "must be float32 or bfloat16")
        f["grad_reduce_dtype"] = dtypes[reduce]
    mode = keys.get("activation_checkpoint.mode", "selective")
    if mode not in ("full", "selective", "none"):
        raise keys.fail("activation_checkpoint.mode", mode, "must be full, selective or none")
    f["ac"] = mode
    if mode == "selective":
        option = keys.get("activation_checkpoint.selective_ac_option", "2")
        notes.append(f"note: activation_checkpoint.mode selective (selective_ac_option {option!r}) is simulated as "
                     "the stack's selective recompute, not op by op")
    f["precision"] = _titan_precision(keys)
    compiled = _bool(keys, "compile.enable", keys.get("compile.enable", False))
    components = _str_list(keys.get("compile.components", ["model", "loss"]))
    if not (compiled and "model" in components):
        notes.append("note: the model is not compiled (compile.enable / compile.components); the torchtitan stack "
                     "profile was fitted on torch.compile'd runs and is used as it is")
    balanced = _bool(keys, "debug.moe_force_load_balance", keys.get("debug.moe_force_load_balance", False))
    f["routing"] = "balanced"
    if not balanced:
        notes.append("note: debug.moe_force_load_balance is off: routing is simulated balanced (pass --routing "
                     "zipf:<s> or a tokens-per-expert file for a skew)")
    world = None
    if "dp_shard" in f:
        world = math.prod(f.get(k, 1) for k in ("dp_shard", "dp_replicate", "cp", "tp", "pp"))
    return ImportedConfig(path=path, framework="torchtitan", stack="torchtitan", model=model, fields=f,
                          notes=tuple(notes), ignored=keys.ignored(), world_size=world, local_batch=local_batch,
                          layers_per_stage=layers_per_stage)


# --- Megatron ----------------------------------------------------------------------------------------------


def _read_text(path: str) -> str:
    raw = read_input(Path(path), "config file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text: {err}") from None


def _megatron_args(path: str, text: str) -> dict[str, Any]:
    """A Megatron-LM argument list (``--tensor-model-parallel-size 2 --sequence-parallel ...``, shell line
    continuations and comments allowed) as ``{name_with_underscores: value}``; words before the first
    ``--`` option (a launcher, a script) are kept under ``command`` and reported as ignored."""
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as err:
        raise ConfigError(f"{path}: cannot split the argument list: {err}") from None
    out: dict[str, Any] = {}
    key: str | None = None
    values: list[Any] = []
    command: list[str] = []

    def close() -> None:
        if key is not None:
            out[key] = True if not values else values[0] if len(values) == 1 else list(values)

    for word in words:
        if word.startswith("--") and len(word) > 2 and not _is_number(word):
            close()
            name, eq, value = word[2:].partition("=")
            key, values = name.replace("-", "_"), ([_scalar(value)] if eq else [])
        elif key is None:
            command.append(word)
        else:
            values.append(_scalar(word))
    close()
    if command:
        out["command"] = " ".join(command)
    return out


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _scalar(word: str) -> Any:
    low = word.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return int(word)
    except ValueError:
        pass
    try:
        return float(word)
    except ValueError:
        return word


def _megatron_yaml(path: str, text: str) -> dict[str, Any]:
    try:
        import yaml
    except ImportError:
        raise ConfigError(f"{path}: reading a YAML recipe needs PyYAML (pip install pyyaml)") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: malformed YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a Megatron-Bridge recipe must be a mapping of sections, got {type(data).__name__}")
    return data


class _Leaves:
    """Megatron keys by leaf name (``model.tensor_model_parallel_size`` and ``--tensor-model-parallel-size``
    both answer ``tensor_model_parallel_size``); two different values for one leaf are an error."""

    def __init__(self, keys: _Keys) -> None:
        self.keys = keys
        self.paths: dict[str, list[str]] = {}
        for path in keys.flat:
            leaf = path.rsplit(".", 1)[-1]
            self.paths.setdefault(MEGATRON_ALIASES.get(leaf, leaf), []).append(path)

    def get(self, leaf: str, default: Any = None) -> Any:
        paths = self.paths.get(leaf, [])
        values = {p: self.keys.get(p) for p in paths}
        set_values = {p: v for p, v in values.items() if v is not None}
        if len({repr(v) for v in set_values.values()}) > 1:
            shown = ", ".join(f"{p} = {v!r}" for p, v in set_values.items())
            raise ConfigError(f"{self.keys.where}: {leaf} is given twice with different values ({shown})")
        if set_values:
            return next(iter(set_values.values()))
        return None if paths else default

    def path(self, leaf: str) -> str:
        return (self.paths.get(leaf) or [leaf])[0]

    def fail(self, leaf: str, value: Any, why: str) -> ConfigError:
        return self.keys.fail(self.path(leaf), value, why)

    def int(self, leaf: str, field: str, out: dict[str, Any], *, minimum: int = 1) -> None:
        value = self.get(leaf)
        if value is not None:
            out[field] = _int(self.keys, self.path(leaf), value, minimum=minimum)

    def flag(self, leaf: str) -> bool | None:
        value = self.get(leaf)
        return None if value is None else _bool(self.keys, self.path(leaf), value)


def _megatron_precision(m: _Leaves) -> str:
    mixed = m.get("mixed_precision")
    if isinstance(mixed, str):
        if mixed not in MEGATRON_MIXED_PRECISION:
            raise m.fail("mixed_precision", mixed, f"moesim knows {', '.join(MEGATRON_MIXED_PRECISION)}")
        return MEGATRON_MIXED_PRECISION[mixed]
    fmt, recipe = m.get("fp8"), m.get("fp8_recipe")
    if fmt in (None, False):
        return "bf16"
    if recipe not in MEGATRON_FP8_RECIPES:
        raise m.fail("fp8_recipe", recipe, f"moesim simulates the FP8 recipes {', '.join(MEGATRON_FP8_RECIPES)}")
    return MEGATRON_FP8_RECIPES[recipe]


def _megatron_backend(m: _Leaves) -> str:
    if m.flag("moe_enable_deepep"):
        return "deepep"
    dispatcher = m.get("moe_token_dispatcher_type", "alltoall")
    if dispatcher == "alltoall":
        return "nccl"
    if dispatcher == "flex":
        backend = m.get("moe_flex_dispatcher_backend", "deepep")
        if backend not in ("deepep", "hybridep"):
            raise m.fail("moe_flex_dispatcher_backend", backend, "moesim simulates deepep and hybridep")
        return str(backend)
    raise m.fail("moe_token_dispatcher_type", dispatcher, "moesim simulates alltoall and flex (DeepEP / HybridEP)")


def _megatron_layout_string(m: _Leaves, value: Any) -> str:
    """``pipeline_model_parallel_layout`` as a string, or its Megatron-Bridge list-of-chunks form."""
    if isinstance(value, str):
        return value
    symbols = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}
    if isinstance(value, list) and all(isinstance(c, list) for c in value):
        try:
            return "|".join("".join(symbols[str(s)] for s in chunk) for chunk in value)
        except KeyError as err:
            raise m.fail("pipeline_model_parallel_layout", value, f"unknown layer kind {err.args[0]!r} "
                         f"(known: {', '.join(symbols)})") from None
    raise m.fail("pipeline_model_parallel_layout", value, "must be a layout string or a list of chunks")


def _megatron_cuda_graphs(m: _Leaves) -> str | None:
    """The plan's CUDA-graph scope from ``cuda_graph_impl`` / ``cuda_graph_scope`` (or the older
    ``enable_cuda_graph`` / ``external_cuda_graph``): "none", "full" (full-iteration) or "partial" (per-layer
    or Transformer Engine scopes). None when the plan has no such field (the keys are then listed as ignored)."""
    if "cuda_graphs" not in {f.name for f in dataclasses.fields(ParallelPlan)}:
        return None
    impl = m.get("cuda_graph_impl")
    if impl is None:
        if m.flag("enable_cuda_graph") or m.flag("external_cuda_graph"):
            return "partial"
        return "none" if m.paths.get("cuda_graph_impl") else None
    if impl not in ("none", "local", "transformer_engine"):
        raise m.fail("cuda_graph_impl", impl, "must be none, local or transformer_engine")
    scopes = _str_list(m.get("cuda_graph_scope", []))
    if impl == "none":
        return "none"
    return "full" if "full_iteration" in scopes else "partial"


def _from_megatron(path: str) -> ImportedConfig:
    text = _read_text(path)
    yaml_file = Path(path).suffix.lower() in (".yaml", ".yml")
    data = _megatron_yaml(path, text) if yaml_file else _megatron_args(path, text)
    command = data.pop("command", None) if not yaml_file else None
    keys = _Keys(path, data)
    m = _Leaves(keys)
    notes: list[str] = []
    f: dict[str, Any] = {}
    for leaf, field in (("tensor_model_parallel_size", "tp"), ("pipeline_model_parallel_size", "pp"),
                        ("expert_model_parallel_size", "ep"), ("expert_tensor_parallel_size", "etp"),
                        ("context_parallel_size", "cp"), ("micro_batch_size", "micro_batch"),
                        ("global_batch_size", "global_batch"), ("seq_length", "seq_len"),
                        ("virtual_pipeline_model_parallel_size", "vpp")):
        m.int(leaf, field, f)
    if "etp" not in f and f.get("tp", 1) > 1:
        f["etp"] = f["tp"]  # Megatron-Core: expert_tensor_parallel_size defaults to the tensor-parallel size
    lpvs = m.get("num_layers_per_virtual_pipeline_stage")
    layers_per_virtual_stage = None
    if lpvs is not None:
        if "vpp" in f:
            raise m.fail("num_layers_per_virtual_pipeline_stage", lpvs, "give it or "
                         "virtual_pipeline_model_parallel_size, not both")
        layers_per_virtual_stage = _int(keys, m.path("num_layers_per_virtual_pipeline_stage"), lpvs)
    if f.get("pp", 1) > 1:
        f["pp_schedule"] = "interleaved-1f1b" if f.get("vpp", 1) > 1 or layers_per_virtual_stage else "1f1b"
    elif f.get("vpp", 1) > 1:
        raise m.fail("virtual_pipeline_model_parallel_size", f["vpp"], "needs pipeline_model_parallel_size > 1")
    m.get("train_iters")
    sp = m.flag("sequence_parallel")
    if f.get("tp", 1) > 1 and sp is False:
        notes.append("note: sequence_parallel is off with tensor parallelism; moesim simulates sequence-parallel TP")
    granularity = m.get("recompute_granularity")
    modules = _str_list(m.get("recompute_modules", []))
    if granularity in (None, "none"):
        f["ac"] = "none"
        if modules:
            raise m.fail("recompute_modules", modules, "needs recompute_granularity selective")
    elif granularity == "full":
        f["ac"] = "full"
        method, count = m.get("recompute_method", "uniform"), m.get("recompute_num_layers", 1)
        if method != "uniform" or count != 1:
            raise m.fail("recompute_method", f"{method} / recompute_num_layers {count}", "moesim simulates full "
                         "recompute of every layer (uniform, 1 layer per group)")
    elif granularity == "selective":
        f["ac"] = "selective"
        if modules:
            f["recompute_modules"] = ",".join(modules)
    else:
        raise m.fail("recompute_granularity", granularity, "must be full, selective or none")
    f["precision"] = _megatron_precision(m)
    f["ep_backend"] = _megatron_backend(m)
    sms = m.get("moe_hybridep_num_sms" if f["ep_backend"] == "hybridep" else "moe_deepep_num_sms")
    if sms is not None and f["ep_backend"] != "nccl":
        f["deepep_sms"] = _int(keys, m.path("moe_hybridep_num_sms" if f["ep_backend"] == "hybridep"
                                            else "moe_deepep_num_sms"), sms)
    overlap = m.flag("overlap_moe_expert_parallel_comm")
    if overlap is not None:
        f["ep_overlap"] = overlap
    m.get("delay_wgrad_compute")
    graphs = _megatron_cuda_graphs(m)
    if graphs is not None:
        f["cuda_graphs"] = graphs
    if m.paths.get("mtp_num_layers"):
        mtp = m.get("mtp_num_layers")
        f["mtp_layers"] = 0 if mtp is None else _int(keys, m.path("mtp_num_layers"), mtp, minimum=0)
    fp32 = m.flag("grad_reduce_in_fp32")
    bf16 = m.flag("grad_reduce_in_bf16")
    if fp32 is not None:
        f["grad_reduce_dtype"] = "fp32" if fp32 else "bf16"
    elif bf16 is not None:
        f["grad_reduce_dtype"] = "bf16" if bf16 else "fp32"
    distributed = m.flag("use_distributed_optimizer")
    if distributed is False:
        raise m.fail("use_distributed_optimizer", False, "moesim's Megatron stack shards the optimizer (ZeRO-1); "
                     "plain data parallelism is not simulated")
    if distributed is None:
        notes.append("note: use_distributed_optimizer is not set; simulated with the optimizer sharded (ZeRO-1) "
                     "as the Megatron stack profile does")
    balanced = m.flag("moe_router_force_load_balancing")
    f["routing"] = "balanced"
    if not balanced:
        notes.append("note: moe_router_force_load_balancing is off: routing is simulated balanced (pass --routing "
                     "zipf:<s> or a tokens-per-expert file for a skew)")
    layout = m.get("pipeline_model_parallel_layout")
    split: dict[str, bool | int | None] = {k: m.flag(k) or False for k in ("account_for_embedding_in_pipeline_split",
                                             "account_for_loss_in_pipeline_split")}
    for k in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"):
        v = m.get(k)
        split[k] = None if v is None else _int(keys, m.path(k), v)
    if layout is not None:
        if any(split.values()):
            raise m.fail("pipeline_model_parallel_layout", layout, "give a layout or the pipeline-split options "
                         "(account_for_*, decoder_first/last_pipeline_num_layers), not both")
        f["pp_layout"] = _megatron_layout_string(m, layout)
    shape = {m.path(leaf): (field, m.get(leaf)) for leaf, field in MEGATRON_SHAPE.items() if m.get(leaf) is not None}
    return ImportedConfig(path=path, framework="megatron", stack="megatron", model=_megatron_model(shape), fields=f,
                          shape=shape,
                          notes=tuple(notes), split=split if any(split.values()) else {},
                          ignored=keys.ignored() + ((f"the words before the first option ({command})",) if command else ()),
                          layers_per_virtual_stage=layers_per_virtual_stage)


def _megatron_model(shape: Mapping[str, tuple[str, Any]]) -> str | None:
    """The one catalog model whose shape the config's architecture keys give (None: none or several)."""
    if not shape:
        return None
    matches = [name for name in model_names()
               if all(getattr(load_model(name), field) == value for field, value in shape.values())]
    return matches[0] if len(matches) == 1 else None


# --- both ----------------------------------------------------------------------------------------------------


def import_config(path: str | Path, framework: str) -> ImportedConfig:
    """Read a TorchTitan job TOML (``framework = "torchtitan"``) or a Megatron-Bridge recipe YAML /
    Megatron-LM argument list (``"megatron"``). Raises :class:`ConfigError` on a value moesim cannot express."""
    if framework not in FRAMEWORKS:
        raise ConfigError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    return _from_titan(str(path)) if framework == "torchtitan" else _from_megatron(str(path))


def megatron_layout(n_layers: int, pp: int, vpp: int = 1, *, embedding: bool = False, loss: bool = False,
                    first: int | None = None, last: int | None = None, mtp: int = 0) -> str:
    """The ``pipeline_model_parallel_layout`` (:mod:`sim.pp_layout` syntax) of Megatron-Core's own split.

    ``embedding`` / ``loss`` (``account_for_*_in_pipeline_split``) count the embedding and the loss as one
    layer each, so ``n_layers + embedding + loss`` must divide evenly over the ``pp * vpp`` chunks (which may
    then outnumber the decoder layers); ``first`` / ``last`` (``decoder_first/last_pipeline_num_layers``)
    give the first and last pipeline ranks that many decoder layers, the other ranks sharing the rest evenly.
    Chunk ``v * pp + r`` is virtual stage ``v`` of rank ``r``; MTP modules and the loss close the last chunk.

    >>> megatron_layout(8, 4, first=1, last=1)
    'Et|(t*3|)*2tL'
    >>> megatron_layout(6, 2, 2, embedding=True, loss=True, mtp=1)
    'Et|(t*2|)*2tmL'
    """
    n_chunks = pp * vpp
    if (embedding or loss) and (first is not None or last is not None):
        raise ConfigError("account_for_*_in_pipeline_split and decoder_first/last_pipeline_num_layers cannot be "
                          "combined")
    if first is not None or last is not None:
        per_rank: list[int | None] = [None] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
        rest = n_layers - sum(v for v in per_rank if v is not None)
        open_ranks = sum(v is None for v in per_rank)
        if rest < 0 or (open_ranks and rest % open_ranks) or (not open_ranks and rest):
            raise ConfigError(f"decoder_first/last_pipeline_num_layers ({first}, {last}) leave {rest} of the "
                              f"{n_layers} layers for {open_ranks} other pipeline ranks: not an even split")
        filled = [v if v is not None else rest // max(open_ranks, 1) for v in per_rank]
        if any(v % vpp for v in filled):
            raise ConfigError(f"layers per pipeline rank {filled} must divide by "
                              f"virtual_pipeline_model_parallel_size ({vpp})")
        counts = [filled[c % pp] // vpp for c in range(n_chunks)]
    else:
        slots = n_layers + int(embedding) + int(loss)
        if slots % n_chunks:
            raise ConfigError(f"{n_layers} layers{' + embedding' if embedding else ''}{' + loss' if loss else ''} "
                              f"= {slots} do not divide evenly over pp ({pp}) x vpp ({vpp}) = {n_chunks} chunks")
        size = slots // n_chunks
        counts = [size] * n_chunks
        if embedding:
            counts[0] -= 1
        if loss:
            counts[-1] -= 1
    chunks = ["t" * n for n in counts]
    chunks[0] = "E" + chunks[0]
    chunks[-1] += "m" * mtp + "L"
    return _compress(chunks)


def _compress(chunks: list[str]) -> str:
    """Chunks written in layout syntax with ``x*N`` runs and ``(...|)*N`` groups of identical chunks."""

    def runs(chunk: str) -> str:
        out, i = [], 0
        while i < len(chunk):
            j = i
            while j < len(chunk) and chunk[j] == chunk[i]:
                j += 1
            out.append(chunk[i] if j - i == 1 else f"{chunk[i]}*{j - i}")
            i = j
        return "".join(out)

    pieces, i = [], 0
    while i < len(chunks):
        j = i
        while j < len(chunks) and chunks[j] == chunks[i]:
            j += 1
        last = j == len(chunks)
        body = runs(chunks[i])
        if j - i == 1:
            pieces.append(body if last else body + "|")
        else:
            pieces.append(f"({body}|)*{j - i}" if not last else f"({body}|)*{j - i - 1}{body}")
        i = j
    return "".join(pieces)


def plan_fields(cfg: ImportedConfig, n_gpus: int, model: ModelSpec | None = None,
                overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The plan fields of ``cfg`` on ``n_gpus`` GPUs for ``model`` (default: ``cfg.model``), ``overrides``
    (e.g. command-line flags) taking precedence, with every derived field filled
    (:func:`sim.loaders.derive_plan_fields`)."""
    if cfg.world_size is not None and cfg.world_size != n_gpus:
        raise ConfigError(f"{cfg.path}: its parallel degrees multiply to {cfg.world_size} GPUs, not --gpus {n_gpus}")
    if model is None:
        if cfg.model is None:
            raise ConfigError(cfg.missing_model())
        model = load_model(cfg.model)
    cfg.check_model(model)
    given = {**cfg.fields, **(overrides or {})}
    pp = given.get("pp", 1)
    if cfg.layers_per_stage is not None and "vpp" not in (overrides or {}):
        per_stage, first_less, last_less = cfg.layers_per_stage
        stages = math.ceil((model.n_layers + first_less + last_less) / per_stage)
        if stages % pp:
            raise ConfigError(f"{cfg.path}: parallelism.pipeline_parallel_layers_per_stage = {per_stage} gives "
                              f"{stages} stages for {model.n_layers} layers: not a multiple of pp ({pp})")
        if given.get("pp_schedule") == "1f1b" and stages != pp:
            raise ConfigError(f"{cfg.path}: parallelism.pipeline_parallel_layers_per_stage = {per_stage} gives "
                              f"{stages} stages; a single-stage schedule (1F1B) needs pp ({pp})")
        given["vpp"] = stages // pp
    if cfg.layers_per_virtual_stage is not None and "vpp" not in (overrides or {}):
        per_rank, rem = divmod(model.n_layers, pp * cfg.layers_per_virtual_stage)
        if rem or per_rank < 1:
            raise ConfigError(f"{cfg.path}: num_layers_per_virtual_pipeline_stage = {cfg.layers_per_virtual_stage}: "
                              f"{model.n_layers} layers do not split into pp ({pp}) x stages of that size")
        given["vpp"] = per_rank
    if cfg.split and "pp_layout" not in (overrides or {}):
        mtp = given.get("mtp_layers")
        if mtp is None:
            from sim.stacks import load_stack

            mtp = model.n_mtp_layers if load_stack(cfg.stack).trains_mtp else 0
        try:
            given["pp_layout"] = megatron_layout(
                model.n_layers, pp, given.get("vpp", 1), embedding=cfg.split["account_for_embedding_in_pipeline_split"],
                loss=cfg.split["account_for_loss_in_pipeline_split"], first=cfg.split["decoder_first_pipeline_num_layers"],
                last=cfg.split["decoder_last_pipeline_num_layers"], mtp=mtp)
        except ConfigError as err:
            raise ConfigError(f"{cfg.path}: {err}") from None
    if "global_batch" not in given and cfg.local_batch is not None:
        inner = given.get("tp", 1) * pp * given.get("cp", 1)
        if n_gpus % inner == 0:
            given["global_batch"] = cfg.local_batch * (n_gpus // inner)
    return derive_plan_fields(given, n_gpus, f"plan ({cfg.path})")
