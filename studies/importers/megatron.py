"""Megatron configs in moesim's terms: a Megatron-Bridge recipe YAML (ConfigContainer sections ``model``,
``train``, ``ddp``, ``mixed_precision`` ...) or a Megatron-LM argument list, read by key name wherever the
key sits; and Megatron-Core's own pipeline split as a :mod:`sim.pp_layout` string."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.catalog import load_model, model_names
from sim.errors import ConfigError
from sim.fileio import read_input
from sim.limits import MAX_JSON_DEPTH, PLAN_BOUNDS
from sim.specs import CP_COMM_TYPES, FP8_ATTENTION_PRECISIONS, TE_GRAPH_SCOPES
from studies.importers.common import (
    ImportedConfig,
    Keys,
    bool_value,
    int_value,
    str_list,
)

__all__ = ["MEGATRON_ALIASES", "MEGATRON_SHAPE", "from_megatron", "megatron_layout"]

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


#: The longest Megatron-LM argument list read (characters): a launch script's arguments are a few kilobytes.
MAX_ARGS_CHARS = 1_000_000


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
    if len(text) > MAX_ARGS_CHARS:  # shlex builds a word a character at a time: megabyte words take minutes
        raise ConfigError(f"{path}: an argument list of {len(text):,} characters; Megatron-LM's are a few thousand "
                          f"(at most {MAX_ARGS_CHARS:,} read)")
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
    except RecursionError:  # PyYAML composes nested nodes recursively
        raise ConfigError(f"{path}: nested deeper than {MAX_JSON_DEPTH} levels") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a Megatron-Bridge recipe must be a mapping of sections, got {type(data).__name__}")
    return data


class _Leaves:
    """Megatron keys by leaf name (``model.tensor_model_parallel_size`` and ``--tensor-model-parallel-size``
    both answer ``tensor_model_parallel_size``); two different values for one leaf are an error."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.paths: dict[str, list[str]] = {}
        for path in keys.flat:
            leaf = path.rsplit(".", 1)[-1]
            self.paths.setdefault(MEGATRON_ALIASES.get(leaf, leaf), []).append(path)
        self.tables = {MEGATRON_ALIASES.get(t, t): path for path in keys.tables for t in [path.rsplit(".", 1)[-1]]}

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

    def _value_not_table(self, leaf: str) -> None:
        if leaf not in self.paths and leaf in self.tables:  # `tensor_model_parallel_size: {a: 1}`
            raise self.keys.fail(self.tables[leaf], "{...}", "must be a value, not a table")

    def int(self, leaf: str, field: str, out: dict[str, Any], *, minimum: int = 1) -> None:
        self._value_not_table(leaf)
        value = self.get(leaf)
        if value is not None:
            out[field] = int_value(self.keys, self.path(leaf), value, minimum=minimum)

    def flag(self, leaf: str) -> bool | None:
        self._value_not_table(leaf)
        value = self.get(leaf)
        return None if value is None else bool_value(self.keys, self.path(leaf), value)


def _megatron_precision(m: _Leaves) -> str:
    mixed = m.get("mixed_precision")
    if mixed is not None and not isinstance(mixed, str):
        raise m.fail("mixed_precision", mixed, f"must be a recipe name ({', '.join(MEGATRON_MIXED_PRECISION)}) or a "
                     "table of its fields")
    if isinstance(mixed, str):
        if mixed not in MEGATRON_MIXED_PRECISION:
            raise m.fail("mixed_precision", mixed, f"moesim knows {', '.join(MEGATRON_MIXED_PRECISION)}")
        return MEGATRON_MIXED_PRECISION[mixed]
    fmt, recipe = m.get("fp8"), m.get("fp8_recipe")
    if fmt in (None, False):
        return "bf16"
    if not isinstance(recipe, str) or recipe not in MEGATRON_FP8_RECIPES:
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


def _megatron_cuda_graphs(m: _Leaves, notes: list[str]) -> tuple[str, str] | None:
    """The plan's CUDA-graph mode and scope from ``cuda_graph_impl`` and its scope list (``cuda_graph_modules``, or
    the older ``cuda_graph_scope``; or the older still ``enable_cuda_graph`` / ``external_cuda_graph``): ("none" |
    "full" | "partial", the captured Transformer Engine scopes moesim models, "" for all of them). None when the
    recipe says nothing. Full-iteration graphs are ``cuda_graph_impl: full_iteration`` (Megatron-Core >= 0.18, the
    Megatron-Bridge 26.06+ presets) or ``local`` with the ``full_iteration`` scope. Scopes moesim does not model
    (``mlp``, ``moe``, ``mamba``) are noted and simulated uncaptured."""
    impl = m.get("cuda_graph_impl")
    if impl is None:
        if m.flag("enable_cuda_graph") or m.flag("external_cuda_graph"):
            return "partial", ""
        return ("none", "") if m.paths.get("cuda_graph_impl") else None
    if impl not in ("none", "local", "transformer_engine", "full_iteration"):
        raise m.fail("cuda_graph_impl", impl, "must be none, local, transformer_engine or full_iteration")
    modules, scope = m.get("cuda_graph_modules"), m.get("cuda_graph_scope")
    if (modules is not None and scope is not None and str_list(m.keys, m.path("cuda_graph_modules"), modules)
            != str_list(m.keys, m.path("cuda_graph_scope"), scope)):
        raise m.fail("cuda_graph_modules", modules, f"and cuda_graph_scope ({scope!r}) cannot both be set "
                     "(Megatron-Core: cuda_graph_scope is the deprecated name)")
    given = "cuda_graph_modules" if modules is not None else "cuda_graph_scope"
    scopes = str_list(m.keys, m.path(given), modules if modules is not None else (scope if scope is not None else []))
    if scopes == ["full"]:  # Megatron-Core's deprecated default: an empty list, the whole layer
        scopes = []
    if impl == "none":
        return "none", ""
    if impl == "full_iteration" or "full_iteration" in scopes:
        return "full", ""
    known = [x for x in scopes if x in TE_GRAPH_SCOPES]
    other = [x for x in scopes if x not in TE_GRAPH_SCOPES]
    if other:
        notes.append(f"note: cuda_graph_scope {', '.join(other)} is not modelled; those kernels are simulated "
                     "with the stack's launches")
    if scopes and not known:
        return "none", ""
    return "partial", "" if not scopes or set(known) == set(TE_GRAPH_SCOPES) else ",".join(known)


def from_megatron(path: str) -> ImportedConfig:
    """Read the Megatron-Bridge recipe YAML (``.yaml``/``.yml``) or Megatron-LM argument list at ``path``."""
    text = _read_text(path)
    yaml_file = Path(path).suffix.lower() in (".yaml", ".yml")
    data = _megatron_yaml(path, text) if yaml_file else _megatron_args(path, text)
    command = data.pop("command", None) if not yaml_file else None
    keys = Keys(path, data)
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
        layers_per_virtual_stage = int_value(keys, m.path("num_layers_per_virtual_pipeline_stage"), lpvs)
    if f.get("pp", 1) > 1:
        f["pp_schedule"] = "interleaved-1f1b" if f.get("vpp", 1) > 1 or layers_per_virtual_stage else "1f1b"
    elif f.get("vpp", 1) > 1:
        raise m.fail("virtual_pipeline_model_parallel_size", f["vpp"], "needs pipeline_model_parallel_size > 1")
    m.get("train_iters")
    cp_comm = m.get("cp_comm_type")
    if cp_comm is not None:
        if cp_comm not in CP_COMM_TYPES:
            raise m.fail("cp_comm_type", cp_comm, f"moesim simulates {' or '.join(CP_COMM_TYPES)}")
        if f.get("cp", 1) > 1:  # recipes name it with cp 1 too, where it does nothing
            f["cp_comm_type"] = cp_comm
    sp = m.flag("sequence_parallel")
    if f.get("tp", 1) > 1 and sp is False:
        notes.append("note: sequence_parallel is off with tensor parallelism; moesim simulates sequence-parallel TP")
    granularity = m.get("recompute_granularity")
    modules = str_list(m.keys, m.path("recompute_modules"), m.get("recompute_modules", []))
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
        f["deepep_sms"] = int_value(keys, m.path("moe_hybridep_num_sms" if f["ep_backend"] == "hybridep"
                                            else "moe_deepep_num_sms"), sms)
    overlap = m.flag("overlap_moe_expert_parallel_comm")
    if overlap is not None:
        f["ep_overlap"] = overlap
    m.get("delay_wgrad_compute")
    fp8_head = m.flag("fp8_output_proj")
    if fp8_head is not None:
        f["fp8_output_proj"] = bool(fp8_head) and f["precision"] == "mxfp8"
        if fp8_head and f["precision"] != "mxfp8":
            notes.append("note: fp8_output_proj applies to MXFP8 only (Megatron-Core); the output layer is simulated "
                         "in BF16")
    fp8_dpa = m.flag("fp8_dot_product_attention")
    if fp8_dpa is not None:
        f["fp8_attention"] = bool(fp8_dpa) and f["precision"] in FP8_ATTENTION_PRECISIONS
        if fp8_dpa and f["precision"] not in FP8_ATTENTION_PRECISIONS:
            notes.append("note: fp8_dot_product_attention runs inside an FP8 recipe only; the attention is simulated "
                         "in BF16")
    fuser = m.flag("use_transformer_engine_op_fuser")
    if fuser is not None:
        f["fused_grouped_mlp"] = bool(fuser) and f["precision"] == "mxfp8"
        if fuser and f["precision"] == "mxfp8":
            notes.append("note: use_transformer_engine_op_fuser is simulated as Transformer Engine's fused grouped MLP "
                         "(the CuTe DSL kernels Megatron-Bridge's presets turn on with it, NVTE_CUTEDSL_FUSED_GROUPED_MLP"
                         "=1; without that variable TE runs the grouped MLP unfused)")
        elif fuser:
            notes.append("note: Transformer Engine fuses the grouped MLP under MXFP8 only; the experts are simulated "
                         "unfused")
    graphs = _megatron_cuda_graphs(m, notes)
    if graphs is not None:
        f["cuda_graphs"] = graphs[0]
        if graphs[1]:
            f["cuda_graph_scope"] = graphs[1]
    if m.paths.get("mtp_num_layers"):
        mtp = m.get("mtp_num_layers")
        f["mtp_layers"] = 0 if mtp is None else int_value(keys, m.path("mtp_num_layers"), mtp, minimum=0)
    fp32 = m.flag("grad_reduce_in_fp32")
    bf16 = m.flag("grad_reduce_in_bf16")
    if fp32 is not None:
        f["grad_reduce_dtype"] = "fp32" if fp32 else "bf16"
    elif bf16 is not None:
        f["grad_reduce_dtype"] = "bf16" if bf16 else "fp32"
    bucket = m.get("bucket_size")
    if bucket is not None:
        f["ddp_bucket_params"] = float(int_value(keys, m.path("bucket_size"), bucket))
    if m.flag("use_megatron_fsdp"):
        notes.append("note: use_megatron_fsdp is set: Megatron FSDP's per-module gathers are not simulated; the plan "
                     "is simulated with the distributed optimizer (ZeRO-1) as the Megatron stack profile does")
    distributed = m.flag("use_distributed_optimizer")
    if distributed is False:
        raise m.fail("use_distributed_optimizer", False, "moesim's Megatron stack shards the optimizer (ZeRO-1); "
                     "plain data parallelism is not simulated")
    if distributed is None:
        notes.append("note: use_distributed_optimizer is not set; simulated with the optimizer sharded (ZeRO-1) "
                     "as the Megatron stack profile does")
    _megatron_capacity(m, f, notes)
    balanced = m.flag("moe_router_force_load_balancing")
    f["routing"] = "balanced"
    if not balanced:
        notes.append("note: moe_router_force_load_balancing is off: routing is simulated balanced (pass --routing "
                     "zipf:<s> or a tokens-per-expert file for a skew, or collapse:<experts per EP rank> for the "
                     "slowest the plan's token capacities allow)")
    layout = m.get("pipeline_model_parallel_layout")
    split: dict[str, bool | int | None] = {k: m.flag(k) or False for k in ("account_for_embedding_in_pipeline_split",
                                             "account_for_loss_in_pipeline_split")}
    for k in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"):
        v = m.get(k)
        split[k] = None if v is None else int_value(keys, m.path(k), v)
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


def _capacity_factor(m: _Leaves, leaf: str) -> float:
    """A capacity factor option as a float; 0 when unset (null: dropless)."""
    value = m.get(leaf)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= PLAN_BOUNDS[_CAPACITY_FIELDS[leaf]][1]:
        raise m.fail(leaf, value, f"must be a number in (0, {PLAN_BOUNDS[_CAPACITY_FIELDS[leaf]][1]:g}] or null (dropless)")
    return float(value)


#: Megatron-Core's token-capacity options and the plan fields they set.
_CAPACITY_FIELDS = {"moe_expert_capacity_factor": "expert_capacity_factor",
                    "moe_expert_rank_capacity_factor": "ep_rank_capacity_factor"}


def _megatron_capacity(m: _Leaves, f: dict[str, Any], notes: list[str]) -> None:
    """The token capacities of Megatron-Core's MoE: per expert (``moe_expert_capacity_factor``, with
    ``moe_pad_expert_input_to_capacity``) and HybridEP's per-rank receive budget
    (``moe_expert_rank_capacity_factor``)."""
    expert = _capacity_factor(m, "moe_expert_capacity_factor")
    if expert:
        f["expert_capacity_factor"] = expert
    if m.flag("moe_pad_expert_input_to_capacity"):
        if not expert:
            raise m.fail("moe_pad_expert_input_to_capacity", True, "needs moe_expert_capacity_factor (Megatron-Core "
                         "pads each expert to its capacity)")
        f["pad_to_capacity"] = True
    rank = _capacity_factor(m, "moe_expert_rank_capacity_factor")
    if rank and f.get("ep_backend") == "hybridep":
        f["ep_rank_capacity_factor"] = rank
    elif rank:
        notes.append(f"note: moe_expert_rank_capacity_factor ({rank:g}) sizes the {f.get('ep_backend')} dispatcher's "
                     "static buffers; its token budget is simulated for HybridEP only")


def _megatron_model(shape: Mapping[str, tuple[str, Any]]) -> str | None:
    """The one catalog model whose shape the config's architecture keys give (None: none or several)."""
    if not shape:
        return None
    matches = [name for name in model_names()
               if all(getattr(load_model(name), field) == value for field, value in shape.values())]
    return matches[0] if len(matches) == 1 else None



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

