"""Scenarios: a model on a cluster, a base plan, and named variants, with measured numbers where published.

A scenario file is TOML::

    [scenario]                 # model (catalog name or file), gpus; optional name, description, cluster, gpu,
                               # stack (a stack profile name or file, default torchtitan)
    model = "deepseek-v3-671b"
    cluster = "hgx-b200"
    gpus = 256
    [base]                     # ParallelPlan fields shared by every variant
    tp = 2
    [[variant]]                # name; optional plan = {overrides}, measured_tokens_per_s_per_gpu, source,
    name = "bf16"              # fitted = true when a number was fitted to this run alone
    measured_tokens_per_s_per_gpu = 651

Built-in scenarios are package data (``scenario_names()``); users pass a path instead.

>>> "dsv3-671b-b200" in scenario_names()
True
>>> sc = load_scenario("dsv3-671b-b200")
>>> [v.fitted for v in sc.variants]  # the stack's numbers come from the joint calibration over every run
[False, False, False, False]
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.errors import ConfigError, MoesimError
from sim.limits import CLUSTER_BOUNDS
from sim.loaders import (
    check_plan_fields,
    derive_plan_fields,
    plan_from_mapping,
    read_toml,
)

if TYPE_CHECKING:
    from sim.costs import CostModel
    from sim.predict import Prediction
    from sim.specs import ClusterSpec, ModelSpec
    from sim.stacks import StackProfile

__all__ = ["Scenario", "Variant", "scenario_names", "load_scenario", "scenario_from_mapping", "run_scenario",
           "variant_name", "DEFAULT_SCENARIO"]

DEFAULT_SCENARIO = "dsv3-671b-b200"
_HEAD_KEYS = {"name", "description", "model", "cluster", "gpus", "gpu", "stack"}
_VARIANT_KEYS = {"name", "plan", "measured_tokens_per_s_per_gpu", "source", "fitted"}


@dataclass(frozen=True)
class Variant:
    """One named plan of a scenario: overrides of the base plan, and what was measured, if anything."""

    name: str
    plan: dict[str, Any] = field(default_factory=dict)
    measured_tokens_per_s_per_gpu: float | None = None
    source: str = ""
    fitted: bool = False


@dataclass(frozen=True)
class Scenario:
    """A model on a cluster of ``gpus`` GPUs, a base plan, and its variants."""

    name: str
    description: str
    model: str
    cluster: str
    gpus: int
    base: dict[str, Any]
    variants: tuple[Variant, ...]
    #: stack profile name or file ("" = the default, torchtitan)
    stack: str = ""


def scenario_names() -> list[str]:
    """Names of the built-in scenarios."""
    return sorted(p.name[:-5] for p in resources.files(__package__).iterdir() if p.name.endswith(".toml"))


def _variant(where: str, data: Any) -> Variant:
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or set(data) - _VARIANT_KEYS:
        got = ", ".join(sorted(map(str, data))) if isinstance(data, dict) else repr(data)
        raise ConfigError(f"scenario {where!r}: each [[variant]] needs a name and may only hold "
                          f"{', '.join(sorted(_VARIANT_KEYS - {'name'}))} (got {got})")
    plan = check_plan_fields(data.get("plan", {}), f"scenario {where!r}: variant {data['name']!r}: plan")
    measured = data.get("measured_tokens_per_s_per_gpu")
    if measured is not None and (isinstance(measured, bool) or not isinstance(measured, (int, float))
                                 or not 0 < measured < 1e12):
        raise ConfigError(f"scenario {where!r}: variant {data['name']!r}: measured_tokens_per_s_per_gpu must be "
                          f"a positive number, got {measured!r}")
    fitted = data.get("fitted", False)
    if not isinstance(fitted, bool):
        raise ConfigError(f"scenario {where!r}: variant {data['name']!r}: fitted must be true or false")
    source = data.get("source", "")
    if not isinstance(source, str):
        raise ConfigError(f"scenario {where!r}: variant {data['name']!r}: source must be a string, got {source!r}")
    return Variant(data["name"], dict(plan), None if measured is None else float(measured), source, fitted)


def load_scenario(name_or_path: str) -> Scenario:
    """A scenario by built-in name or TOML path (:class:`ConfigError` on unknown keys or a bad file)."""
    if name_or_path in scenario_names():
        data = tomllib.loads(resources.files(__package__).joinpath(f"{name_or_path}.toml").read_text(encoding="utf-8"))
    elif not isinstance(name_or_path, str) or not name_or_path:
        raise ConfigError(f"scenario: expected a built-in name or a TOML path, got {name_or_path!r}")
    elif Path(name_or_path).exists() or name_or_path.endswith(".toml"):
        data = read_toml(name_or_path)
    else:
        raise ConfigError(f"unknown scenario {name_or_path!r}; built in: {', '.join(scenario_names())} "
                          "(or give a TOML path)")
    return scenario_from_mapping(data, name_or_path)


def scenario_from_mapping(data: Any, where: str) -> Scenario:
    """A :class:`Scenario` from a parsed scenario table (``where`` names it in errors)."""
    if not isinstance(data, dict):
        raise ConfigError(f"scenario {where!r}: expected a table, got {data!r}")
    unknown = set(data) - {"scenario", "base", "variant"}
    if unknown:
        raise ConfigError(f"scenario {where!r}: unknown table(s) {', '.join(sorted(map(str, unknown)))}; "
                          "allowed: scenario, base, variant")
    head = data.get("scenario", {})
    if not isinstance(head, dict):
        raise ConfigError(f"scenario {where!r}: [scenario] must be a table, got {head!r}")
    for key in ("model", "gpus"):
        if key not in head:
            raise ConfigError(f"scenario {where!r}: [scenario] needs {key!r}")
    extra = set(head) - _HEAD_KEYS
    if extra:
        raise ConfigError(f"scenario {where!r}: unknown key(s) {', '.join(sorted(map(str, extra)))} in [scenario]")
    for key in ("name", "description", "model", "cluster", "gpu"):
        if key in head and (not isinstance(head[key], str) or (key != "description" and not head[key])):
            raise ConfigError(f"scenario {where!r}: [scenario] {key} must be a non-empty string, got {head[key]!r}")
    gpus = head["gpus"]
    low, high = CLUSTER_BOUNDS["n_gpus"]
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not low <= gpus <= high:
        raise ConfigError(f"scenario {where!r}: gpus must be an integer in [{low}, {high}], got {gpus!r}")
    raw_variants = data.get("variant", [{"name": "base"}])
    if not isinstance(raw_variants, list) or not raw_variants:
        raise ConfigError(f"scenario {where!r}: variant must be one or more [[variant]] tables, got {raw_variants!r}")
    variants = tuple(_variant(where, v) for v in raw_variants)
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ConfigError(f"scenario {where!r}: variant names must be unique, got {names}")
    base = check_plan_fields(data.get("base", {}), f"scenario {where!r}: [base]")
    from sim.catalog import default_cluster

    cluster = head.get("cluster") or default_cluster(head.get("gpu", "b200"))
    if "gpu" in head:  # a name the catalog knows, and the cluster's own GPU when both are given
        from sim.catalog import load_cluster, load_gpu

        try:
            load_gpu(head["gpu"])
            if "cluster" in head and load_cluster(cluster).gpu.name != head["gpu"]:
                raise ConfigError(f"[scenario] gpu {head['gpu']!r} is not cluster {cluster!r}'s GPU "
                                  f"({load_cluster(cluster).gpu.name}); give one of them")
        except MoesimError as err:
            raise ConfigError(f"scenario {where!r}: {err}") from None
    stack = head.get("stack", "")
    if not isinstance(stack, str) or ("stack" in head and not stack.strip()):
        raise ConfigError(f"scenario {where!r}: stack must be a stack profile name or file, got {stack!r}")
    return Scenario(head.get("name", where), head.get("description", ""), head["model"], cluster, gpus,
                    base, variants, stack)


def variant_name(scenario: Scenario, variant: Variant, overrides: dict[str, Any] | None) -> str:
    """``variant``'s name, followed by the overrides that change what its variants differ in (a plan field
    some variant of ``scenario`` sets), so a row never keeps a name its plan no longer has.

    >>> sc = load_scenario("dsv3-671b-b200")
    >>> variant_name(sc, sc.variants[1], {"ep_backend": "hybridep", "seq_len": 4096})
    'bf16 + DeepEP with ep_backend=hybridep'
    >>> variant_name(sc, sc.variants[1], {"ep_backend": "deepep"})
    'bf16 + DeepEP'
    """
    varied = {k for v in scenario.variants for k in v.plan}
    own = {**scenario.base, **variant.plan}
    changed = [f"{k}={v}" for k, v in (overrides or {}).items() if k in varied and own.get(k) != v]
    return f"{variant.name} with {', '.join(changed)}" if changed else variant.name


def run_scenario(
    scenario: Scenario,
    *,
    model: ModelSpec | None = None,
    cluster: ClusterSpec | None = None,
    costs: CostModel | None = None,
    overrides: dict[str, Any] | None = None,
    stack: StackProfile | str | None = None,
) -> list[Prediction]:
    """Predict every variant of ``scenario`` (model and cluster from the scenario unless given).

    ``overrides`` are plan fields applied on top of every variant (the command line's plan flags);
    ``stack`` (a profile, name or file) overrides the scenario's own ``stack``.
    Each prediction carries the variant's measured number and source.
    """
    from sim.catalog import load_cluster, load_model
    from sim.predict import predict
    from sim.stacks import load_stack

    profile = load_stack(stack if stack is not None else (scenario.stack or None))
    model = model or load_model(scenario.model)
    cluster = cluster or load_cluster(scenario.cluster, n_gpus=scenario.gpus)
    predictions = []
    for variant in scenario.variants:
        fields = {**scenario.base, **variant.plan, **(overrides or {})}
        fields = {**profile.defaults_for(fields), **fields}  # e.g. DeepEP under DeepSeek's stack when unsaid
        owner = f"scenario {scenario.name!r} variant {variant.name!r}"
        plan = plan_from_mapping(derive_plan_fields(fields, cluster.n_gpus, owner), owner)
        reason = profile.refusal(plan)
        if reason is not None:
            raise ConfigError(f"{owner}: {reason}")
        prediction = predict(model, cluster, plan, costs, name=variant_name(scenario, variant, overrides),
                             stack=profile)
        prediction.measured_tokens_per_s_per_gpu = variant.measured_tokens_per_s_per_gpu
        prediction.source = variant.source
        predictions.append(prediction)
    return predictions
