"""The built-in catalog: models, GPUs and cluster templates, each with its source.

Names resolve to specs; a name that is a path to a file loads that file instead (a HuggingFace
``config.json`` or a TOML of ModelSpec fields for models).

>>> load_gpu("b200").num_sms
148
>>> load_cluster("hgx-b200", n_gpus=16).n_nodes
2
>>> "deepseek-v3-671b" in model_names()
True
>>> default_cluster("gb200"), default_cluster("b200")
('gb200-nvl72', 'hgx-b200')
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from sim.errors import CatalogError, ConfigError
from sim.loaders import (
    cluster_from_mapping,
    gpu_from_mapping,
    load_model_file,
    model_from_mapping,
)
from sim.specs import ClusterSpec, GPUSpec, ModelSpec

__all__ = ["model_names", "gpu_names", "cluster_names", "load_model", "load_gpu", "load_cluster", "default_cluster"]


@cache
def _table(kind: str) -> dict[str, Any]:
    import tomllib

    text = resources.files(__package__).joinpath(f"{kind}.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def model_names() -> list[str]:
    return list(_table("models"))


def gpu_names() -> list[str]:
    return list(_table("gpus"))


def cluster_names() -> list[str]:
    return list(_table("clusters"))


def _looks_like_path(name: str) -> bool:
    return name.endswith((".json", ".toml")) or "/" in name


def _check_name(kind: str, name: object) -> None:
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{kind} must be a catalog name or a file path (a non-empty string), got {name!r}")


def _unknown(kind: str, name: str, names: list[str]) -> CatalogError:
    return CatalogError(f"unknown {kind} {name!r}; the catalog has: {', '.join(names)} (or give a file path)")


def load_model(name: str) -> ModelSpec:
    """A catalog model by name, or a model file (``config.json`` or TOML) by path."""
    _check_name("model", name)
    if _looks_like_path(name) or Path(name).is_file():
        return load_model_file(name)
    table = _table("models")
    if name not in table:
        raise _unknown("model", name, model_names())
    return model_from_mapping(table[name], name)


def load_gpu(name: str) -> GPUSpec:
    """A catalog GPU by name."""
    _check_name("gpu", name)
    table = _table("gpus")
    if name not in table:
        raise _unknown("gpu", name, gpu_names())
    return gpu_from_mapping(table[name], name)


def default_cluster(gpu: str) -> str:
    """The cluster template a GPU comes in when none is named: the first template built on it
    (``gb200`` -> the NVL72 rack, ``b200`` -> the HGX node); ``hgx-<gpu>`` when no template names it."""
    for name, data in _table("clusters").items():
        if data.get("gpu") == gpu:
            return name
    return f"hgx-{gpu}"


def load_cluster(name: str, *, n_gpus: int | None = None, gpu: str | None = None) -> ClusterSpec:
    """A cluster template by name (or a TOML file path), optionally resized and with another GPU."""
    _check_name("cluster", name)
    if _looks_like_path(name):
        from sim.loaders import read_toml

        data = read_toml(name)
        cluster_name = Path(name).stem
        if len(data) == 1 and isinstance(next(iter(data.values())), dict) and "gpu" not in data:
            cluster_name, data = next(iter(data.items()))
    else:
        table = _table("clusters")
        if name not in table:
            raise _unknown("cluster", name, cluster_names())
        cluster_name, data = name, dict(table[name])
    data = dict(data)
    gpu_name = gpu or data.get("gpu")
    if not isinstance(gpu_name, str):
        raise ConfigError(f"cluster {cluster_name!r}: missing required key 'gpu'")
    gpu_spec = load_gpu(gpu_name)
    if n_gpus is not None:
        if "n_gpus" in data and _looks_like_path(name):  # a file's own count is checked, not silently replaced
            cluster_from_mapping(data, cluster_name, gpu_spec)
        data["n_gpus"] = n_gpus
    return cluster_from_mapping(data, cluster_name, gpu_spec)
