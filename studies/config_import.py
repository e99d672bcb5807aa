"""Framework job configs in: a TorchTitan job TOML, a Megatron-Bridge recipe YAML or a Megatron-LM argument
list, translated into a moesim model, stack and :class:`~sim.specs.ParallelPlan` fields.

A job config says how the work is split, not on how many GPUs: the GPU count comes from the caller
(``moesim predict --gpus``) unless every data-parallel degree of a TorchTitan config is explicit. Every key
the translation does not read is listed in :attr:`ImportedConfig.ignored` (a section none of whose keys is
read is listed once, as ``section.*``); a value moesim cannot express raises :class:`~sim.errors.ConfigError`
naming the key and the value. The readers live in :mod:`studies.importers` (one module per framework).

>>> megatron_layout(n_layers=2, pp=2, vpp=2, embedding=True, loss=True)
'E|(t|)*2L'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.catalog import load_model
from sim.errors import ConfigError
from sim.loaders import derive_plan_fields
from sim.specs import ModelSpec
from studies.importers.common import ImportedConfig, ignored_note
from studies.importers.megatron import from_megatron, megatron_layout
from studies.importers.torchtitan import from_torchtitan

__all__ = ["FRAMEWORKS", "ImportedConfig", "ignored_note", "import_config", "megatron_layout", "plan_fields"]

FRAMEWORKS = ("torchtitan", "megatron")


def import_config(path: str | Path, framework: str) -> ImportedConfig:
    """Read a TorchTitan job TOML (``framework = "torchtitan"``) or a Megatron-Bridge recipe YAML /
    Megatron-LM argument list (``"megatron"``). Raises :class:`ConfigError` on a value moesim cannot express."""
    if framework not in FRAMEWORKS:
        raise ConfigError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    return from_torchtitan(str(path)) if framework == "torchtitan" else from_megatron(str(path))


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
