"""What the framework-config readers share: the imported result (:class:`ImportedConfig`) and a flat,
read-tracking view of a nested config (:class:`Keys`) whose unread keys are reported, never dropped."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sim.errors import ConfigError
from sim.limits import MAX_JSON_DEPTH
from sim.specs import ModelSpec

__all__ = ["ImportedConfig", "Keys", "bool_value", "check_tree", "ignored_note", "int_value", "str_list",
           "MAX_TREE_NODES"]


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
        self.tables: set[str] = set()  # the paths that hold a table of keys, not a value
        check_tree(where, data)
        self._flatten("", data)

    def _flatten(self, prefix: str, data: Mapping[str, Any]) -> None:
        for key, value in data.items():
            if str(key).startswith("_"):  # Hydra/OmegaConf metadata such as _target_
                continue
            path = f"{prefix}{key}"
            if isinstance(value, Mapping) and value:
                self.tables.add(path)
                self._flatten(path + ".", value)
            else:
                self.flat[path] = value

    def get(self, path: str, default: Any = None) -> Any:
        if path in self.flat:
            self.used.add(path)
            return self.flat[path]
        if path in self.tables:  # `tensor_parallel_degree = {a = 1}`: a table where a value belongs
            raise self.fail(path, "{...}", "must be a value, not a table")
        return default

    def text(self, path: str, default: str | None = None) -> str | None:
        """The string at ``path`` (``default`` when absent); a ConfigError for a number, list or table."""
        value = self.get(path)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.fail(path, value, "must be a string")
        return value

    def has(self, path: str) -> bool:
        return path in self.flat or path in self.tables

    def fail(self, path: str, value: Any, why: str) -> ConfigError:
        return ConfigError(f"{self.where}: {path} = {value!r}: {why}")

    def ignored(self) -> tuple[str, ...]:
        """Unread keys; a section none of whose keys was read is named once as ``section.*``."""
        read_sections = {".".join(u.split(".")[:i]) for u in self.used for i in range(1, u.count(".") + 2)}
        out: dict[str, None] = {}  # ordered and O(1) per key: a config of 100,000 keys lists in well under a second
        for key in sorted(k for k in self.flat if k not in self.used):
            parts = key.split(".")
            section = next((".".join(parts[:i]) for i in range(1, len(parts))
                            if ".".join(parts[:i]) not in read_sections), None)
            out[f"{section}.*" if section else key] = None
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


def str_list(keys: Keys, path: str, value: Any) -> list[str]:
    """A list of names: a list of strings or one comma- or space-separated string; anything else (a number, a
    boolean, a table, a list holding one) a ConfigError naming ``path``."""
    if isinstance(value, str):
        return [v.strip() for v in value.replace(" ", ",").split(",") if v.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise keys.fail(path, value, "must be a list of names (or one comma-separated string)")


#: How many values a framework config may hold once YAML aliases are expanded (a "billion laughs" file is small on disk
#: and expands without end); its depth has the bound of every parsed input, :data:`sim.limits.MAX_JSON_DEPTH`.
MAX_TREE_NODES = 1_000_000


def check_tree(where: str, data: Any) -> None:
    """Refuse a config nested deeper than :data:`~sim.limits.MAX_JSON_DEPTH`, holding more than :data:`MAX_TREE_NODES` values
    (aliases counted each time they are used) or a cycle (a YAML alias inside its own anchor). Iterative: no
    recursion limit is reached on the way."""
    stack: list[tuple[Any, int, tuple[int, ...]]] = [(data, 0, ())]
    nodes = 0
    while stack:
        value, depth, parents = stack.pop()
        nodes += 1
        if nodes > MAX_TREE_NODES:
            raise ConfigError(f"{where}: holds more than {MAX_TREE_NODES:,} values (YAML aliases expanded); not a "
                              "framework config")
        if depth > MAX_JSON_DEPTH:
            raise ConfigError(f"{where}: nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(value, Mapping | list | tuple):
            if id(value) in parents:
                raise ConfigError(f"{where}: a value contains itself (a YAML alias inside its own anchor)")
            children = value.values() if isinstance(value, Mapping) else value
            stack.extend((child, depth + 1, (*parents, id(value))) for child in children)

