"""Scenario tables: what a valid one gives, and each malformed field named."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.limits import CLUSTER_BOUNDS
from sim.scenarios import scenario_from_mapping


def _head(**kw):
    return {"scenario": {"model": "debug", "gpus": 8, **kw}}


def test_a_minimal_scenario_defaults() -> None:
    sc = scenario_from_mapping(_head(), "mine")
    assert (sc.name, sc.model, sc.gpus) == ("mine", "debug", 8)
    assert [v.name for v in sc.variants] == ["base"]
    assert sc.base == {} and sc.stack == ""
    named = scenario_from_mapping({**_head(name="x", description="d", stack="megatron"),
                                   "base": {"ep": 4}, "variant": [{"name": "a"}, {"name": "b"}]}, "w")
    assert (named.name, named.description, named.stack, named.base) == ("x", "d", "megatron", {"ep": 4})
    assert [v.name for v in named.variants] == ["a", "b"]


def test_gpu_count_bounds_are_inclusive() -> None:
    low, high = CLUSTER_BOUNDS["n_gpus"]
    for ok in (low, high):
        scenario_from_mapping(_head(gpus=ok), "w")
    for bad in (low - 1, high + 1, True, "8", 8.0):
        with pytest.raises(ConfigError, match="gpus must be an integer"):
            scenario_from_mapping(_head(gpus=bad), "w")


@pytest.mark.parametrize(("data", "needle"), [
    ([], "expected a table"),
    ({"scenario": {"model": "debug", "gpus": 8}, "extra": {}}, "unknown table"),
    ({"scenario": []}, "must be a table"),
    ({"scenario": {"gpus": 8}}, "needs 'model'"),
    ({"scenario": {"model": "debug"}}, "needs 'gpus'"),
    ({"scenario": {"model": "debug", "gpus": 8, "bogus": 1}}, "unknown key"),
    ({"scenario": {"model": "", "gpus": 8}}, "model must be a non-empty string"),
    ({"scenario": {"model": 3, "gpus": 8}}, "model must be a non-empty string"),
    ({"scenario": {"model": "debug", "gpus": 8}, "variant": []}, "one or more"),
    ({"scenario": {"model": "debug", "gpus": 8}, "variant": [{"name": "a"}, {"name": "a"}]}, "unique"),
    ({"scenario": {"model": "debug", "gpus": 8}, "base": {"pp": "8"}}, "pp"),
    ({"scenario": {"model": "debug", "gpus": 8, "stack": 1}}, "stack must be"),
])
def test_malformed_scenarios_name_the_field(data, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        scenario_from_mapping(data, "w")
