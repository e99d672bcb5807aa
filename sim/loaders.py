"""Strict readers of spec files: TOML in human units, HuggingFace ``config.json`` for models.

Every reader converts human units (TFLOPS, GB, GB/s, Gb/s, microseconds) to SI once, rejects unknown
and missing keys and wrong types with a :class:`~sim.errors.ConfigError` naming the field, and never
half-builds a spec.

>>> spec = model_from_mapping({"name": "toy", "n_layers": 2, "dim": 64, "n_heads": 2,
...     "vocab_size": 100, "n_routed_experts": 4, "top_k": 2, "moe_inter_dim": 32}, "toy")
>>> spec.n_moe_layers
2
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from sim.errors import ConfigError, PlanError
from sim.fileio import read_input
from sim.limits import (
    CLUSTER_BOUNDS,
    FABRIC_BOUNDS,
    GPU_BOUNDS,
    MAX_JSON_DEPTH,
    MODEL_BOUNDS,
    PLAN_BOUNDS,
    Bound,
    check_fields,
    json_depth,
)
from sim.specs import ClusterSpec, FabricSpec, GPUSpec, ModelSpec, ParallelPlan

__all__ = [
    "read_toml",
    "read_table_array",
    "refuse_duplicate_ids",
    "read_json",
    "parse_json",
    "build_spec",
    "model_from_mapping",
    "model_from_hf_config",
    "gpu_from_mapping",
    "cluster_from_mapping",
    "plan_from_mapping",
    "load_model_file",
    "load_plan_file",
    "derive_plan_fields",
    "check_plan_fields",
    "INTERLEAVED_DEFAULT_VPP",
]

SpecT = TypeVar("SpecT")

TERA = 1e12
GIGA = 1e9


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; a missing or malformed file is a :class:`ConfigError`."""
    path = Path(path)
    raw = read_input(path, "TOML file")  # a regular file, size-bounded (sim.limits.MAX_INPUT_MB)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: malformed TOML: {err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text: {err}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested deeper than {MAX_JSON_DEPTH} levels") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None
    except ValueError as err:  # tomllib's own int() of a literal past Python's int-conversion limit
        raise ConfigError(f"{path}: malformed TOML: {err}") from None
    if json_depth(data) > MAX_JSON_DEPTH:
        raise ConfigError(f"{path}: nested deeper than {MAX_JSON_DEPTH} levels")
    return data


def read_table_array(path: str | Path, key: str) -> list[Any]:
    """The ``[[key]]`` tables of the TOML file at ``path``, a file that holds nothing else: another top-level key,
    or no ``[[key]]`` table, is a :class:`ConfigError` naming the file (each table is the caller's to check).

    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
    ...     _ = f.write("[[pair]]\\nid = 'a'\\n")
    >>> read_table_array(f.name, "pair")
    [{'id': 'a'}]
    >>> os.unlink(f.name)
    """
    data = read_toml(path)
    unknown = sorted(set(data) - {key})
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key(s) {', '.join(unknown)}; the file holds [[{key}]] tables")
    entries = data.get(key)
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: no [[{key}]] tables")
    return entries


def refuse_duplicate_ids(where: str, what: str, ids: list[str]) -> None:
    """A :class:`ConfigError` naming ``where`` and each id of ``ids`` given more than once (``what``: the tables' noun).

    >>> refuse_duplicate_ids("f.toml", "run", ["a", "b", "a"])
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: f.toml: duplicate run id(s) a
    """
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ConfigError(f"{where}: duplicate {what} id(s) {', '.join(dup)}")


def parse_json(text: str | bytes, where: str) -> Any:
    """Parse JSON text strictly (msgspec): no ``NaN``/``Infinity`` literals, at most
    :data:`~sim.limits.MAX_JSON_DEPTH` levels; any failure is a :class:`ConfigError` naming ``where``.

    >>> parse_json('{"a": [1, 2]}', "x.json")
    {'a': [1, 2]}
    >>> parse_json('[NaN]', "x.json")
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: x.json: malformed JSON: JSON is malformed: invalid character (byte 1)
    """
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogatepass")
    depth = 0
    for byte in text:  # cheap pre-scan: refuse deep nesting before the recursive decoder sees it
        if byte in b"[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise ConfigError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
        elif byte in b"]}":
            depth -= 1
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as err:
        raise ConfigError(f"{where}: malformed JSON: {err}") from None
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None


def read_json(path: str | Path) -> Any:
    """Parse a JSON file (strictly, see :func:`parse_json`); a missing or malformed file is a :class:`ConfigError`."""
    path = Path(path)
    raw = read_input(path, "JSON file")  # a regular file, size-bounded (sim.limits.MAX_INPUT_MB)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text: {err}") from None
    return parse_json(raw, str(path))


_BOUNDS: dict[type, dict[str, Bound]] = {
    ModelSpec: MODEL_BOUNDS,
    GPUSpec: GPU_BOUNDS,
    FabricSpec: FABRIC_BOUNDS,
    ClusterSpec: CLUSTER_BOUNDS,
    ParallelPlan: PLAN_BOUNDS,
}
_BASE_TYPES: dict[Any, type] = {int: int, "int": int, float: float, "float": float, bool: bool, "bool": bool,
                                str: str, "str": str}


def _coerce(owner: str, field: str, value: Any, annotation: Any, bound: Bound | None = None) -> Any:
    """Check ``value`` against a field's type and bounds (msgspec, strict: ``true`` is no integer, ``"8"``
    no number); ints are accepted where floats are, and integral floats where ints are."""
    base = _BASE_TYPES.get(annotation)
    if base is None:
        return value
    if base is int and isinstance(value, float) and value.is_integer() and abs(value) < 2.0**53:
        value = int(value)
    try:
        value = msgspec.convert(value, base, strict=True)
    except msgspec.ValidationError:
        kind = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[base]
        raise ConfigError(f"{owner}: {field} must be {kind}, got {value!r}") from None
    if bound is not None and base in (int, float):
        check_fields(owner, {field: value}, {field: bound})
    return value


def build_spec(cls: type[SpecT], data: Mapping[str, Any], owner: str, *, fixed: Mapping[str, Any] | None = None,
               file_keys: Mapping[str, str] | None = None) -> SpecT:
    """Build dataclass ``cls`` from ``data``: unknown keys, missing required keys, wrong types and values
    outside :mod:`sim.limits` fail, each naming ``owner``, the field and the value. ``file_keys``: the key a
    file writes a field under, where it differs (a human-unit key, :func:`_rename_units`)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{owner}: expected a table, got {data!r}")
    fixed = dict(fixed or {})
    hints = typing.get_type_hints(cls)
    bounds = _BOUNDS.get(cls, {})
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields) - set(fixed), key=str)
    if unknown:  # the keys a file writes (human units where a field has them, and fixed ones it may carry)
        keys = dict(file_keys or {})
        allowed = ", ".join(sorted(keys.get(f, f) for f in fields if f not in fixed or f in keys))
        raise ConfigError(f"{owner}: unknown key(s) {', '.join(map(str, unknown))}; allowed: {allowed}")
    kwargs: dict[str, Any] = dict(fixed)
    for name, field in fields.items():
        if name in fixed:
            continue
        if name in data:
            kwargs[name] = _coerce(owner, name, data[name], hints[name], bounds.get(name))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{owner}: missing required key {(file_keys or {}).get(name, name)!r}")
    try:
        return cls(**kwargs)
    except ConfigError as err:
        text = str(err)
        # The spec names itself ("plan: ...", "model 'x': ..."); add the file/table when it is not there.
        raise ConfigError(text if text.startswith(owner) else f"{owner}: {text}") from None


def _rename_units(owner: str, data: Mapping[str, Any], units: Mapping[str, tuple[str, float]],
                  bounds: Mapping[str, Bound]) -> dict[str, Any]:
    """Map human-unit keys (``bf16_tflops``) to SI fields (``bf16_flops``), scaling each value once. A value
    outside its field's ``bounds`` is refused in the file's own key and units (``bf16_tflops must be at
    least 0.001, got -1``), never in the SI field's."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in units:
            field, scale = units[key]
            try:
                number = float(value) if isinstance(value, (int, float)) else math.nan
            except OverflowError:  # an integer past float's range
                number = math.inf
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(number):
                raise ConfigError(f"{owner}: {key} must be a finite number, got {value!r}")
            if field in bounds:
                low, high = bounds[field]
                check_fields(owner, {key: value}, {key: (low / scale, high / scale)})
            out[field] = number * scale
        elif key in {field for field, _ in units.values()}:
            raise ConfigError(f"{owner}: unknown key {key!r}; write it in human units as one of "
                              f"{', '.join(k for k, (f, _) in units.items() if f == key)}")
        else:
            out[key] = value
    return out


def _file_keys(units: Mapping[str, tuple[str, float]]) -> dict[str, str]:
    """SI field -> the human-unit key a file writes it under."""
    return {field: key for key, (field, _scale) in units.items()}


def model_from_mapping(data: Mapping[str, Any], name: str) -> ModelSpec:
    """A :class:`ModelSpec` from a table of ModelSpec fields (the catalog/TOML form)."""
    return build_spec(ModelSpec, data, f"model {name!r}", fixed={"name": name})


_GPU_UNITS = {
    "bf16_tflops": ("bf16_flops", TERA),
    "fp8_tflops": ("fp8_flops", TERA),
    "fp4_tflops": ("fp4_flops", TERA),
    "hbm_gb": ("hbm_bytes", GIGA),
    "hbm_tb_per_s": ("hbm_bw_bytes_per_s", TERA),
    "nvlink_gb_per_s": ("nvlink_bw_bytes_per_s", GIGA),
}


def gpu_from_mapping(data: Mapping[str, Any], name: str) -> GPUSpec:
    """A :class:`GPUSpec` from a table in human units (TFLOPS, GB, TB/s, GB/s per direction)."""
    owner = f"gpu {name!r}"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{owner}: expected a table, got {data!r}")
    return build_spec(GPUSpec, _rename_units(owner, data, _GPU_UNITS, GPU_BOUNDS), owner, fixed={"name": name},
                      file_keys=_file_keys(_GPU_UNITS))


_FABRIC_UNITS = {"hop_latency_us": ("hop_latency_s", 1e-6), "nic_latency_us": ("nic_latency_s", 1e-6)}
_CLUSTER_UNITS = {
    "nvlink_gb_per_s": ("nvlink_bw_bytes_per_s", GIGA),
    "nic_gbps": ("nic_bw_bytes_per_s", GIGA / 8),
    "nvlink_latency_us": ("nvlink_latency_s", 1e-6),
}


def cluster_from_mapping(data: Mapping[str, Any], name: str, gpu: GPUSpec) -> ClusterSpec:
    """A :class:`ClusterSpec` from a table in human units; ``gpu`` is the resolved GPU spec."""
    owner = f"cluster {name!r}"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{owner}: expected a table, got {data!r}")
    data = dict(data)
    data.pop("gpu", None)
    fabric_data = data.pop("fabric", {})
    if not isinstance(fabric_data, Mapping):
        raise ConfigError(f"{owner}: fabric must be a table, got {fabric_data!r}")
    fabric = build_spec(FabricSpec, _rename_units(f"{owner} fabric", fabric_data, _FABRIC_UNITS, FABRIC_BOUNDS),
                        f"{owner} fabric", file_keys=_file_keys(_FABRIC_UNITS))
    return build_spec(ClusterSpec, _rename_units(owner, data, _CLUSTER_UNITS, CLUSTER_BOUNDS), owner,
                      fixed={"name": name, "gpu": gpu, "fabric": fabric},
                      file_keys={**_file_keys(_CLUSTER_UNITS), "gpu": "gpu", "fabric": "fabric"})


def plan_from_mapping(data: Mapping[str, Any], owner: str = "plan") -> ParallelPlan:
    """A :class:`ParallelPlan` from a table of its fields."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{owner}: expected a table, got {data!r}")
    return build_spec(ParallelPlan, data, owner)


def load_plan_file(path: str | Path) -> ParallelPlan:
    """Read a plan TOML: its keys at the top level or under a ``[plan]`` table."""
    data = read_toml(path)
    if set(data) == {"plan"}:
        data = data["plan"]
    return plan_from_mapping(data, f"plan {str(path)!r}")


# HuggingFace field names -> ModelSpec fields, by model family. Fields not listed are ignored
# (they describe inference, tokenizer or initialisation, not the training cost).
_HF_COMMON = {
    "num_hidden_layers": "n_layers",
    "hidden_size": "dim",
    "num_attention_heads": "n_heads",
    "vocab_size": "vocab_size",
    "tie_word_embeddings": "tie_embeddings",
}
#: DeepSeek-V3's MoE as its config.json names it (dense first layers, shared experts, group-limited routing, MTP):
#: DeepSeek's own families and GLM-4.5's, which puts GQA attention in front of it.
_HF_DEEPSEEK_MOE = {
    "first_k_dense_replace": "n_dense_layers",
    "intermediate_size": "dense_inter_dim",
    "n_routed_experts": "n_routed_experts",
    "n_shared_experts": "n_shared_experts",
    "num_experts_per_tok": "top_k",
    "moe_intermediate_size": "moe_inter_dim",
    "n_group": "n_group",
    "topk_group": "topk_group",
    "scoring_func": "score_func",
    "routed_scaling_factor": "route_scale",
    "norm_topk_prob": "norm_topk_prob",
    "num_nextn_predict_layers": "n_mtp_layers",
}
_HF_DEEPSEEK = {
    **_HF_COMMON,
    **_HF_DEEPSEEK_MOE,
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_nope_head_dim": "qk_nope_head_dim",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
}
_HF_QWEN3_MOE = {
    **_HF_COMMON,
    "num_key_value_heads": "n_kv_heads",
    "head_dim": "head_dim",
    "num_experts": "n_routed_experts",
    "num_experts_per_tok": "top_k",
    "moe_intermediate_size": "moe_inter_dim",
    "norm_topk_prob": "norm_topk_prob",
}
_HF_MIXTRAL = {
    **_HF_COMMON,
    "num_key_value_heads": "n_kv_heads",
    "head_dim": "head_dim",
    "num_local_experts": "n_routed_experts",
    "num_experts_per_tok": "top_k",
    "intermediate_size": "moe_inter_dim",
}
_HF_GLM4_MOE = {
    **_HF_COMMON,
    **_HF_DEEPSEEK_MOE,
    "num_key_value_heads": "n_kv_heads",
    "head_dim": "head_dim",
    "use_qk_norm": "qk_norm",
}
_HF_GPT_OSS = {
    **_HF_COMMON,
    "num_key_value_heads": "n_kv_heads",
    "head_dim": "head_dim",
    "num_local_experts": "n_routed_experts",
    "num_experts_per_tok": "top_k",
    "intermediate_size": "moe_inter_dim",
    "sliding_window": "sliding_window",
}
_HF_FAMILIES: dict[str, tuple[dict[str, str], dict[str, Any]]] = {
    "deepseek_v3": (_HF_DEEPSEEK, {"attention": "mla", "score_func": "sigmoid"}),
    "kimi_k2": (_HF_DEEPSEEK, {"attention": "mla", "score_func": "sigmoid"}),
    "deepseek_v2": (_HF_DEEPSEEK, {"attention": "mla", "score_func": "softmax"}),
    "qwen3_moe": (_HF_QWEN3_MOE, {"attention": "gqa", "score_func": "softmax", "qk_norm": True}),
    "mixtral": (_HF_MIXTRAL, {"attention": "gqa", "score_func": "softmax", "norm_topk_prob": True}),
    "gpt_oss": (_HF_GPT_OSS, {"attention": "gqa", "score_func": "softmax", "norm_topk_prob": True}),
    # GLM-4.5 / 4.6 (zai-org): GQA with DeepSeek-V3's MoE (sigmoid scores with a correction bias, shared expert,
    # dense first layers, MTP); partial rotary embedding costs no modelled time
    "glm4_moe": (_HF_GLM4_MOE, {"attention": "gqa", "score_func": "sigmoid"}),
}


def _full_attention_interval(owner: str, layer_types: Any) -> int:
    """``full_attention_interval`` from a config's ``layer_types`` (``"sliding_attention"`` /
    ``"full_attention"`` per layer): the n whose every-n-th-layer pattern has as many full layers (the
    simulator prices the mean over the layers, so where they sit does not matter), or 0 when none is."""
    if not isinstance(layer_types, list) or not all(t in ("sliding_attention", "full_attention") for t in layer_types):
        raise ConfigError(f"{owner}: layer_types must be a list of 'sliding_attention' / 'full_attention', "
                          f"got {layer_types!r}"[:300])
    full = sum(t == "full_attention" for t in layer_types)
    if not full:
        return 0
    every = [n for n in range(1, len(layer_types) + 1) if len(layer_types) // n == full]
    if not every:
        raise ConfigError(f"{owner}: layer_types has {full} full-attention layers of {len(layer_types)}, which no "
                          "every-n-th-layer pattern gives: not supported")
    return every[0]


_MODEL_HINTS = typing.get_type_hints(ModelSpec)


def model_from_hf_config(config: Mapping[str, Any], name: str) -> ModelSpec:
    """A :class:`ModelSpec` from a HuggingFace ``config.json`` (DeepSeek-V3/V2, Kimi-K2, Qwen3-MoE, Mixtral,
    GPT-OSS, GLM-4.5).

    The family comes from ``model_type``. DeepSeek's ``q_lora_rank: null`` means no query compression;
    ``scoring_func: "noaux_tc"``-style topk methods keep the sigmoid/softmax score function given.
    """
    owner = f"model {name!r} (config.json)"
    if not isinstance(config, Mapping):
        raise ConfigError(f"{owner}: expected a JSON object, got {type(config).__name__}")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in _HF_FAMILIES:
        raise ConfigError(
            f"{owner}: model_type {model_type!r} is not supported; supported: {', '.join(_HF_FAMILIES)}"
        )
    mapping, defaults = _HF_FAMILIES[model_type]
    data: dict[str, Any] = dict(defaults)
    for hf_key, field in mapping.items():
        if hf_key in config and config[hf_key] is not None:
            data[field] = config[hf_key]
    if model_type.startswith("deepseek") and config.get("q_lora_rank", 0) is None:
        data["q_lora_rank"] = 0
    for field, value in data.items():  # types and bounds first: nothing below may do arithmetic on a string
        hf_key = next((k for k, v in mapping.items() if v == field), field)
        data[field] = _coerce(owner, hf_key, value, _MODEL_HINTS.get(field), MODEL_BOUNDS.get(field))
    if model_type in ("qwen3_moe", "mixtral") and "head_dim" not in data and "dim" in data and "n_heads" in data:
        data["head_dim"] = data["dim"] // data["n_heads"]
    if model_type == "gpt_oss" and data.get("sliding_window"):
        if "layer_types" not in config:
            raise ConfigError(f"{owner}: sliding_window without layer_types: which layers are windowed is unknown")
        data["full_attention_interval"] = _full_attention_interval(owner, config["layer_types"])
        if len(config["layer_types"]) != data.get("n_layers"):
            raise ConfigError(f"{owner}: layer_types has {len(config['layer_types'])} entries for "
                              f"num_hidden_layers {data.get('n_layers')}")
    if model_type == "qwen3_moe" and config.get("decoder_sparse_step", 1) not in (1, None):
        raise ConfigError(f"{owner}: decoder_sparse_step {config['decoder_sparse_step']} is not supported (only 1)")
    for field in ("n_layers", "dim", "n_heads", "vocab_size", "n_routed_experts", "top_k", "moe_inter_dim"):
        if field not in data:
            hf_key = next(k for k, v in mapping.items() if v == field)
            raise ConfigError(f"{owner}: missing required key {hf_key!r}")
    data["source"] = f"HuggingFace config.json (model_type {model_type})"
    return build_spec(ModelSpec, data, owner, fixed={"name": name})


def load_model_file(path: str | Path) -> ModelSpec:
    """Read a model from a HuggingFace ``config.json`` or a TOML file of ModelSpec fields."""
    path = Path(path)
    name = path.parent.name if path.name == "config.json" else path.stem
    if path.suffix == ".json":
        return model_from_hf_config(read_json(path), name or path.stem)
    data = read_toml(path)
    if len(data) == 1 and isinstance(next(iter(data.values())), dict):
        name, data = next(iter(data.items()))
    return model_from_mapping(data, name)


_PLAN_HINTS = typing.get_type_hints(ParallelPlan)

INTERLEAVED_DEFAULT_VPP = 2
"""Stages per pipeline rank of an interleaved (looped) schedule given without ``vpp``: TorchTitan builds
two stages per rank for multi-stage schedules unless told otherwise."""


def check_plan_fields(fields: Mapping[str, Any], owner: str = "plan") -> dict[str, Any]:
    """Types and bounds of a partial table of plan fields (unknown keys fail), before any arithmetic on them."""
    if not isinstance(fields, Mapping):
        raise ConfigError(f"{owner}: expected a table of plan fields, got {fields!r}")
    unknown = sorted(set(fields) - set(_PLAN_HINTS), key=str)
    if unknown:
        raise ConfigError(f"{owner}: unknown key(s) {', '.join(map(str, unknown))}; "
                          f"allowed: {', '.join(sorted(_PLAN_HINTS))}")
    return {k: _coerce(owner, k, v, _PLAN_HINTS[k], PLAN_BOUNDS.get(k)) for k, v in fields.items()}


def derive_plan_fields(fields: Mapping[str, Any], n_gpus: int, owner: str = "plan") -> dict[str, Any]:
    """Fill unset data-parallel degrees (and a default batch) from the GPU count, TorchTitan style.

    The given fields are type- and bound-checked first (:func:`check_plan_fields`).
    """
    f = check_plan_fields(fields, owner)
    inner = f.get("tp", 1) * f.get("pp", 1) * f.get("cp", 1)
    if n_gpus % inner:
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
    if f.get("pp_schedule") == "interleaved-1f1b" and "vpp" not in f and f.get("pp", 1) > 1:
        f["vpp"] = INTERLEAVED_DEFAULT_VPP
    if "global_batch" not in f:
        local = max(8, 2 * f.get("pp", 1) * f.get("vpp", 1)) * f.get("micro_batch", 1)
        f["global_batch"] = local * f.get("dp_shard", 1) * f.get("dp_replicate", 1)
    return f
