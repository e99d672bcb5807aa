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


def test_variant_errors_list_what_was_given_and_fields_are_kept() -> None:
    with pytest.raises(ConfigError, match=r"may only hold fitted, measured_tokens_per_s_per_gpu, plan, source "
                                          r"\(got name, oops\)"):
        scenario_from_mapping({**_head(), "variant": [{"name": "a", "oops": 1}]}, "w")
    sc = scenario_from_mapping({**_head(description="", cluster="hgx-h100"), "variant": [
        {"name": "a", "measured_tokens_per_s_per_gpu": 12, "source": "s", "fitted": True, "plan": {"ep": 2}}]}, "w")
    assert sc.description == "" and sc.cluster == "hgx-h100"
    v = sc.variants[0]
    assert (v.name, v.plan, v.measured_tokens_per_s_per_gpu, v.source, v.fitted) == ("a", {"ep": 2}, 12.0, "s", True)


def test_load_scenario_by_name_path_or_neither(tmp_path) -> None:
    from sim.scenarios import DEFAULT_SCENARIO, load_scenario

    assert load_scenario(DEFAULT_SCENARIO).name == DEFAULT_SCENARIO
    f = tmp_path / "mine.toml"
    f.write_text('[scenario]\nmodel = "debug"\ngpus = 8\n')
    assert load_scenario(str(f)).model == "debug"
    with pytest.raises(ConfigError, match="missing.toml: no such file"):  # a .toml path: the file's own error
        load_scenario(str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="unknown scenario 'nope'"):
        load_scenario("nope")


def test_variant_and_run_errors_name_the_scenario() -> None:
    with pytest.raises(ConfigError, match=r"^scenario 'w': each \[\[variant\]\]"):
        scenario_from_mapping({**_head(), "variant": [{"oops": 1}]}, "w")
    from sim.scenarios import run_scenario

    sc = scenario_from_mapping({"scenario": {"model": "debug", "gpus": 8}, "base": {"tp": 3}}, "mine")
    with pytest.raises(Exception, match="tp"):
        run_scenario(sc)
