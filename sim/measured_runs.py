"""The measured-runs dataset: strict reader of ``studies/data/measured_runs.toml`` (and users' files), used
by ``moesim validate`` (:mod:`studies.validate`) and by the prediction intervals (:mod:`sim.uncertainty`).

One ``[[run]]`` per measured run (format in the file's header): ``id``, ``model``, ``gpu``, ``gpus``,
``cluster``, ``stack``, ``release``, ``measured_tokens_per_s_per_gpu``, ``source``, optional
``measured_tflops_per_gpu``, ``notes``, ``baseline`` (the id this run is a speedup over), and a
``[run.plan]`` table of :class:`~sim.specs.ParallelPlan` fields (data-parallel degrees derived from
``gpus``). Unknown keys, missing keys, wrong types, duplicate ids and dangling baselines are a
:class:`~sim.errors.ConfigError` naming the run and the field.

The shipped dataset is the studies' (``studies.dataset.MEASURED_RUNS``): the simulator reads a dataset only
from the path it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.catalog import load_cluster, load_model
from sim.errors import ConfigError, MoesimError
from sim.loaders import (
    derive_plan_fields,
    plan_from_mapping,
    read_table_array,
    refuse_duplicate_ids,
)
from sim.specs import ClusterSpec, ModelSpec, ParallelPlan

__all__ = ["MeasuredRun", "load_runs", "resolve_run"]

_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "id": str, "model": str, "gpu": str, "gpus": int, "cluster": str, "stack": str, "release": str,
    "measured_tokens_per_s_per_gpu": (int, float), "source": str,
}
_OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "measured_tflops_per_gpu": (int, float), "measured_memory_gib": (int, float), "notes": str, "baseline": str,
    "fitted": bool,
}


@dataclass(frozen=True)
class MeasuredRun:
    """One measured training run: what, on what, with which framework and plan, and what was measured."""

    id: str
    model: str
    gpu: str
    gpus: int
    cluster: str
    stack: str
    release: str
    measured_tokens_per_s_per_gpu: float
    source: str
    plan: dict[str, Any] = field(default_factory=dict)
    measured_tflops_per_gpu: float | None = None
    notes: str = ""
    baseline: str | None = None
    #: a stack efficiency is fitted to this run (its error is ~0 by construction; never a validation target)
    fitted: bool = False
    #: peak GPU memory the framework logged, GiB (TorchTitan: ``max_reserved_gib``, the caching allocator's
    #: reserved peak: every tensor plus its fragmentation, without the CUDA context or NCCL/DeepEP buffers)
    measured_memory_gib: float | None = None


def _run(where: str, index: int, data: Any) -> MeasuredRun:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: run #{index + 1} must be a table, got {data!r}")
    label = f"{where}: run {data.get('id', f'#{index + 1}')!r}"
    unknown = sorted(set(data) - set(_REQUIRED) - set(_OPTIONAL) - {"plan"})
    if unknown:
        raise ConfigError(f"{label}: unknown key(s) {', '.join(unknown)}; allowed: "
                          f"{', '.join(sorted({*_REQUIRED, *_OPTIONAL, 'plan'}))}")
    for key, kind in {**_REQUIRED, **_OPTIONAL}.items():
        if key not in data:
            if key in _REQUIRED:
                raise ConfigError(f"{label}: missing required key {key!r}")
            continue
        value = data[key]
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            raise ConfigError(f"{label}: {key} has the wrong type: {value!r}")
    for key in ("gpus", "measured_tokens_per_s_per_gpu", "measured_tflops_per_gpu", "measured_memory_gib"):
        if key in data and not (data[key] > 0 and data[key] < float("inf")):
            raise ConfigError(f"{label}: {key} must be a positive finite number, got {data[key]!r}")
    plan = data.get("plan", {})
    if not isinstance(plan, dict):
        raise ConfigError(f"{label}: plan must be a table, got {plan!r}")
    return MeasuredRun(
        id=data["id"], model=data["model"], gpu=data["gpu"], gpus=data["gpus"], cluster=data["cluster"],
        stack=data["stack"], release=data["release"],
        measured_tokens_per_s_per_gpu=float(data["measured_tokens_per_s_per_gpu"]), source=data["source"],
        plan=dict(plan),
        measured_tflops_per_gpu=(float(data["measured_tflops_per_gpu"]) if "measured_tflops_per_gpu" in data
                                 else None),
        notes=data.get("notes", ""), baseline=data.get("baseline"), fitted=bool(data.get("fitted", False)),
        measured_memory_gib=(float(data["measured_memory_gib"]) if "measured_memory_gib" in data else None),
    )


def load_runs(path: str | Path) -> list[MeasuredRun]:
    """Every run of the dataset at ``path``, checked as a whole."""
    where = str(path)
    runs = [_run(where, i, r) for i, r in enumerate(read_table_array(path, "run"))]
    for r in runs:  # a malformed plan fails the whole file, as it does alone (a run that cannot run is skipped)
        label = f"{where}: run {r.id!r} plan"
        try:
            plan_from_mapping(derive_plan_fields(r.plan, r.gpus), label)
        except MoesimError as err:
            raise ConfigError(str(err) if str(err).startswith(label) else f"{label}: {err}") from None
    ids = [r.id for r in runs]
    refuse_duplicate_ids(where, "run", ids)
    for r in runs:
        if r.baseline is not None and r.baseline not in ids:
            raise ConfigError(f"{where}: run {r.id!r}: baseline {r.baseline!r} is not a run id of this file")
        if r.baseline == r.id:
            raise ConfigError(f"{where}: run {r.id!r}: baseline is the run itself (a speedup over itself)")
    return runs


def resolve_run(run: MeasuredRun) -> tuple[ModelSpec, ClusterSpec, ParallelPlan]:
    """The model, cluster (template resized to ``gpus``, with ``gpu``) and plan of ``run``."""
    model = load_model(run.model)
    cluster = load_cluster(run.cluster, n_gpus=run.gpus, gpu=run.gpu)
    plan = plan_from_mapping(derive_plan_fields(run.plan, run.gpus), f"run {run.id!r} plan")
    return model, cluster, plan
