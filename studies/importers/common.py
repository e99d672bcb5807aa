"""What the framework-config readers share: the imported result (:class:`ImportedConfig`) and a flat,
read-tracking view of a nested config (:class:`Keys`) whose unread keys are reported, never dropped."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sim.errors import ConfigError
from sim.specs import ModelSpec

__all__ = ["ImportedConfig", "Keys", "bool_value", "ignored_note", "int_value", "str_list"]


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


class Keys:
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


def int_value(keys: Keys, path: str, value: Any, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise keys.fail(path, value, f"must be an integer >= {minimum}")
    return value


def bool_value(keys: Keys, path: str, value: Any) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise keys.fail(path, value, "must be true or false")
    return value


def str_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.replace(" ", ",").split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return []

