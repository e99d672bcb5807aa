"""Every refusal of a malformed scenario names the scenario, the table (and variant) and the field: each
field of every built-in scenario's ``[scenario]``, ``[base]`` and ``[[variant]]`` tables (and each
variant's plan), one at a time given a value of the wrong type, is refused with a message naming them."""

from __future__ import annotations

import copy
import tomllib
from importlib import resources
from typing import Any

import pytest

from sim.errors import ConfigError
from sim.scenarios import scenario_from_mapping, scenario_names

WHERE = "my-scenario.toml"


def _data(name: str) -> dict[str, Any]:
    return tomllib.loads(resources.files("sim.scenarios").joinpath(f"{name}.toml").read_text(encoding="utf-8"))


def _cases() -> list[tuple[str, tuple[str | int, ...]]]:
    out: list[tuple[str, tuple[str | int, ...]]] = []
    for name in scenario_names():
        data = _data(name)
        out += [(name, ("scenario", k)) for k in data.get("scenario", {})]
        out += [(name, ("base", k)) for k in data.get("base", {})]
        for i, variant in enumerate(data.get("variant", [])):
            out += [(name, ("variant", i, k)) for k in variant if k != "plan"]
            out += [(name, ("variant", i, "plan", k)) for k in variant.get("plan", {})]
    return out


CASES = _cases()


def test_the_cases_cover_every_table() -> None:
    assert {p[0] for _, p in CASES} == {"scenario", "base", "variant"}
    assert any("plan" in p for _, p in CASES)


@pytest.mark.parametrize(("name", "path"), CASES, ids=[f"{n}:{'.'.join(map(str, p))}" for n, p in CASES])
def test_a_field_of_the_wrong_type_is_refused_naming_the_scenario_the_table_and_the_field(
        name: str, path: tuple[str | int, ...]) -> None:
    data = _data(name)
    scenario_from_mapping(copy.deepcopy(data), WHERE)  # as shipped it is accepted
    holder: Any = data
    for p in path[:-1]:
        holder = holder[p]
    holder[path[-1]] = 7 if isinstance(holder[path[-1]], str) else "seven"
    with pytest.raises(ConfigError) as err:
        scenario_from_mapping(data, WHERE)
    message = str(err.value)
    assert message.startswith(f"scenario {WHERE!r}: "), message
    assert str(path[-1]) in message, message
    if path[0] == "variant" and path[-1] != "name":
        assert repr(data["variant"][path[1]]["name"]) in message, message
    if path[0] == "base":
        assert "[base]" in message, message
