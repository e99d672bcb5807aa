"""Every refusal of a malformed model, GPU or cluster table names the entry, the field and the value: each
field of every catalog entry (``sim/catalog/*.toml``, the same form as a user's file), one at a time given
a value of the wrong type, or an unknown key added, is refused with a message naming all three."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from sim.catalog import load_gpu
from sim.errors import ConfigError
from sim.loaders import cluster_from_mapping, gpu_from_mapping, model_from_mapping

CATALOG = Path(__file__).resolve().parents[2] / "sim" / "catalog"


def _entries(kind: str) -> dict[str, dict[str, Any]]:
    return dict(tomllib.loads((CATALOG / f"{kind}.toml").read_text(encoding="utf-8")))


def _build(kind: str, name: str, data: dict[str, Any]) -> object:
    if kind == "models":
        return model_from_mapping(data, name)
    if kind == "gpus":
        return gpu_from_mapping(data, name)
    return cluster_from_mapping(data, name, load_gpu(data.get("gpu", "b200")))


def _wrong(value: Any) -> Any:
    return 7 if isinstance(value, str) else "seven"


def _cases() -> list[tuple[str, str, tuple[str, ...]]]:
    out = []
    for kind in ("models", "gpus", "clusters"):
        for name, entry in _entries(kind).items():
            for key, value in entry.items():
                if kind == "clusters" and key == "gpu" or key == "source":
                    continue  # the GPU is resolved before the table is read; a source is free text
                if isinstance(value, dict):
                    out += [(kind, name, (key, sub)) for sub in value]
                else:
                    out.append((kind, name, (key,)))
    return out


CASES = _cases()
OWNER = {"models": "model", "gpus": "gpu", "clusters": "cluster"}


@pytest.mark.parametrize(("kind", "name", "path"), CASES, ids=[f"{k}:{n}:{'.'.join(p)}" for k, n, p in CASES])
def test_a_field_of_the_wrong_type_is_refused_naming_the_entry_the_field_and_the_value(
        kind: str, name: str, path: tuple[str, ...]) -> None:
    entry = _entries(kind)[name]
    _build(kind, name, entry)  # as shipped it builds
    holder = entry
    for p in path[:-1]:
        holder = holder[p]
    original = holder[path[-1]]
    holder[path[-1]] = bad = _wrong(original)
    with pytest.raises(ConfigError) as err:
        _build(kind, name, entry)
    message = str(err.value)
    assert message.startswith(f"{OWNER[kind]} {name!r}"), message
    assert path[-1] in message and repr(bad) in message, message
    if len(path) > 1:  # a field of a sub-table (a cluster's fabric) is named with it
        assert f"{path[0]}" in message.split(path[-1])[0], message


@pytest.mark.parametrize("kind", ["models", "gpus", "clusters"])
def test_an_unknown_key_is_refused_naming_the_entry_and_the_key(kind: str) -> None:
    for name, entry in _entries(kind).items():
        entry["no_such_field"] = 1
        with pytest.raises(ConfigError, match=rf"^{OWNER[kind]} '{name}'.*no_such_field"):
            _build(kind, name, entry)
