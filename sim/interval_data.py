"""The evidence prediction intervals are built from, as a versioned data file with provenance.

``moesim validate --write-intervals`` predicts every measured run of the dataset once with the shipped
(joint) calibration and writes ``sim/data/intervals.json``: per run its id, leave-one-group-out group
(system class x stack), GPU, cluster template (system class), stack family, GPU count, model, EP backend,
precision, signature (model, GPU, GPU count, plan, stack: how a later prediction of the same run is
recognised, so its own residual is left out), the in-sample prediction (shipped calibration, with its step and the step boundary it charges) and the
leave-one-group-out prediction (the calibration refitted without the run's group, computed by
``studies.validate.logo_validation`` and passed in as data: sim never imports studies), the measured tokens/s
per GPU and both ``log(measured / predicted)``; and the provenance (dataset and its SHA-256, moesim version,
``git describe``, a hash of the simulator's sources and tables -- ``sim/data/joint_fit.json`` included --, the
runs left out and why). :func:`load_shipped` reads it once per process; a prediction never re-predicts the
dataset. ``tests/sim/test_interval_data.py`` fails when the stored file is stale against today's predictions.

A missing or unreadable file means "no interval" (:func:`interval_note` says why and how to regenerate),
never a fallback to re-predicting.

>>> data = load_shipped()
>>> data is not None and data.schema_version == SCHEMA_VERSION and len(data.runs) >= 2
True
>>> sorted(data.by_family)
['megatron', 'torchtitan']
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

__all__ = ["SCHEMA_VERSION", "INTERVALS_FILE", "ResidualRow", "IntervalData", "run_signature", "build",
           "write", "load", "load_shipped", "interval_note", "dataset_sha256", "sources_sha256"]

#: Version of the file's layout (2: per-run group, class, scale, backend, precision and LOGO prediction).
SCHEMA_VERSION = 2
#: The shipped file (read as a file: sim imports nothing from studies).
INTERVALS_FILE = Path(__file__).resolve().parent / "data" / "intervals.json"
_SIM_DIR = Path(__file__).resolve().parent
REGENERATE = "moesim validate --write-intervals"


@dataclass(frozen=True)
class ResidualRow:
    """One measured run as predicted when the file was written: in sample (the shipped calibration) and
    leave-one-group-out (``logo_predicted_tokens_per_s_per_gpu``: the calibration refitted without its group;
    None when the run had no LOGO prediction)."""

    id: str
    family: str
    signature: str
    predicted_tokens_per_s_per_gpu: float
    measured_tokens_per_s_per_gpu: float
    group: str = ""
    gpu: str = ""
    cluster: str = ""
    gpus: int = 0
    model: str = ""
    ep_backend: str = ""
    precision: str = ""
    #: how the run's kernels reach the GPU (:attr:`sim.predict.Prediction.launch`); "" in files written before it.
    launch: str = ""
    #: how the step orders its EP all-to-alls against compute (:func:`sim.uncertainty.ep_schedule`); "" in files
    #: written before it.
    schedule: str = ""
    logo_predicted_tokens_per_s_per_gpu: float | None = None
    #: the in-sample predicted step (seconds) and the step boundary it charges
    #: (:meth:`sim.stacks.StackProfile.step_boundary_s`); 0 in files written before them.
    step_s: float = 0.0
    boundary_s: float = 0.0

    @property
    def log_residual(self) -> float:
        """In-sample ``log(measured / predicted)``."""
        return math.log(self.measured_tokens_per_s_per_gpu / self.predicted_tokens_per_s_per_gpu)

    @property
    def logo_log_residual(self) -> float:
        """Leave-one-group-out ``log(measured / predicted)`` (NaN without a LOGO prediction)."""
        if self.logo_predicted_tokens_per_s_per_gpu is None:
            return float("nan")
        return math.log(self.measured_tokens_per_s_per_gpu / self.logo_predicted_tokens_per_s_per_gpu)

    @property
    def boundary_gap_s(self) -> float | None:
        """Seconds the measured step exceeds the predicted step without its boundary: the boundary this run would
        need to come out exact (the rest of the model's error rides along); None for a run charged none or
        written before the step was recorded.

        >>> ResidualRow("r", "megatron", "s", 100.0, 80.0, step_s=8.0, boundary_s=2.0).boundary_gap_s
        4.0
        """
        if self.boundary_s <= 0 or self.step_s <= 0:
            return None
        measured_step = self.step_s * self.predicted_tokens_per_s_per_gpu / self.measured_tokens_per_s_per_gpu
        return measured_step - (self.step_s - self.boundary_s)

    @property
    def logo_error(self) -> float | None:
        """Leave-one-group-out relative error ``predicted / measured - 1`` (None without one)."""
        if self.logo_predicted_tokens_per_s_per_gpu is None:
            return None
        return self.logo_predicted_tokens_per_s_per_gpu / self.measured_tokens_per_s_per_gpu - 1


@dataclass(frozen=True)
class IntervalData:
    """The stored residuals and their provenance."""

    schema_version: int
    runs: tuple[ResidualRow, ...]
    provenance: dict[str, Any] = field(default_factory=dict)
    path: str = ""

    @property
    def by_family(self) -> dict[str, list[ResidualRow]]:
        """Framework family -> its runs."""
        out: dict[str, list[ResidualRow]] = {}
        for r in self.runs:
            out.setdefault(r.family, []).append(r)
        return out


def run_signature(model: str, gpu: str, n_gpus: int, plan: Mapping[str, Any], stack: str, release: str) -> str:
    """A short hash that names one prediction's inputs (model, GPU, GPU count, resolved plan, stack).

    >>> run_signature("m", "b200", 8, {"ep": 4}, "torchtitan", "") == run_signature("m", "b200", 8, {"ep": 4}, "torchtitan", "")
    True
    """
    key = json.dumps([model, gpu, int(n_gpus), dict(plan), stack, release], sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def dataset_sha256(path: str | Path) -> str:
    """SHA-256 of a dataset file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def sources_sha256() -> str:
    """SHA-256 over the simulator's sources and data tables (``sim/**/*.py|toml|json``, this file's output
    excluded): a code version that does not need git."""
    h = hashlib.sha256()
    for f in sorted(_SIM_DIR.rglob("*")):
        if f.suffix in (".py", ".toml", ".json") and f.is_file() and f != INTERVALS_FILE and "__pycache__" not in f.parts:
            h.update(str(f.relative_to(_SIM_DIR)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _git_describe() -> str | None:
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=_SIM_DIR, capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _predict_every_run(path: Path) -> tuple[list[tuple[Any, Any]], list[str]]:
    """``[(MeasuredRun, Prediction)]`` of every run of ``path`` with the shipped calibration and its own stack
    profile, and the runs the simulator cannot predict (with the reason)."""
    from sim.errors import MoesimError
    from sim.measured_runs import load_runs, resolve_run
    from sim.predict import predict
    from sim.stacks import profile_for

    out, skipped = [], []
    for run in load_runs(path):
        try:
            model, cluster, plan = resolve_run(run)
            out.append((run, predict(model, cluster, plan, stack=profile_for(run.stack, run.release))))
        except MoesimError as err:
            skipped.append(f"{run.id}: {err}")
    return out, skipped


def build(dataset: str | Path, logo: Iterable[Mapping[str, Any]] | None = None,
          logo_source: str = "") -> IntervalData:
    """Predict every run of ``dataset`` (the shipped one: ``studies.dataset.MEASURED_RUNS``) in sample, and attach ``logo``: its
    leave-one-group-out predictions as data (``{"id", "group", "predicted"}`` rows, as
    ``studies.validate.logo_validation()["runs"]`` gives them; rows without ``predicted`` are skipped)."""
    from sim.uncertainty import ep_schedule, stack_family, step_and_boundary

    path = Path(dataset)
    by_id: dict[str, Mapping[str, Any]] = {}
    for row in logo or ():
        if isinstance(row.get("predicted"), int | float) and row["predicted"] > 0:
            by_id[str(row["id"])] = row
    rows = []
    predicted, skipped = _predict_every_run(path)
    for run, pred in predicted:
        sig = run_signature(pred.model, pred.gpu, pred.n_gpus, pred.plan, pred.stack, pred.stack_release)
        family = stack_family(run.stack)
        lrow = by_id.get(run.id)
        step_s, boundary_s = step_and_boundary(pred)
        rows.append(ResidualRow(
            run.id, family, sig, float(pred.tokens_per_s_per_gpu), float(run.measured_tokens_per_s_per_gpu),
            group=str(lrow.get("group")) if lrow and lrow.get("group") else f"{run.cluster} x {family}",
            gpu=run.gpu, cluster=run.cluster, gpus=int(run.gpus), model=run.model,
            ep_backend=str(pred.plan.get("ep_backend", "")), precision=str(pred.plan.get("precision", "")),
            launch=pred.launch, schedule=ep_schedule(pred.plan),
            logo_predicted_tokens_per_s_per_gpu=float(lrow["predicted"]) if lrow else None,
            step_s=step_s, boundary_s=boundary_s))
    from importlib.metadata import PackageNotFoundError, version

    try:
        moesim_version = version("moesim")
    except PackageNotFoundError:
        moesim_version = "0.0.0+unknown"
    provenance = {"dataset": path.name, "dataset_sha256": dataset_sha256(path),
                  "moesim_version": moesim_version, "git_describe": _git_describe(),
                  "sim_sources_sha256": sources_sha256(), "runs_left_out": skipped, "written_by": REGENERATE,
                  "logo_source": logo_source or ("none: no leave-one-group-out rows given" if not by_id else "given")}
    return IntervalData(SCHEMA_VERSION, tuple(rows), provenance, str(path))


_ROW_KEYS = ("id", "group", "gpu", "cluster", "family", "gpus", "model", "ep_backend", "precision", "launch", "schedule", "signature",
             "predicted_tokens_per_s_per_gpu", "logo_predicted_tokens_per_s_per_gpu", "measured_tokens_per_s_per_gpu",
             "step_s", "boundary_s")


def to_json(data: IntervalData) -> str:
    """The file's text."""
    def row(r: ResidualRow) -> dict[str, Any]:
        logo = r.logo_log_residual
        return {**{k: getattr(r, k) for k in _ROW_KEYS}, "log_residual": r.log_residual,
                "logo_log_residual": logo if math.isfinite(logo) else None}

    return json.dumps({"schema_version": data.schema_version, "provenance": data.provenance,
                       "runs": [row(r) for r in data.runs]}, indent=1) + "\n"


def write(data: IntervalData, path: str | Path = INTERVALS_FILE) -> Path:
    """Write ``data`` atomically to ``path``."""
    from sim.fileio import write_atomic

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, to_json(data))
    return Path(path)


def _positive(where: str, v: Any, *, zero_ok: bool = False) -> float:
    """``v`` as a float: a finite number above 0 (from 0 with ``zero_ok``), else a ConfigError naming ``where``."""
    low_ok = isinstance(v, int | float) and not isinstance(v, bool) and (v >= 0 if zero_ok else v > 0)
    if not (low_ok and v < math.inf):
        what = "a non-negative finite number of seconds" if zero_ok else "a positive finite number"
        raise ConfigError(f"{where} must be {what}, got {v!r}")
    return float(v)


def load(path: str | Path) -> IntervalData:
    """Read an interval file strictly; a :class:`ConfigError` naming the file and field when it is not one."""
    from sim.fileio import read_input
    from sim.loaders import parse_json

    try:
        text = read_input(path, "interval file").decode("utf-8")
    except ConfigError as err:
        raise ConfigError(f"cannot read interval file {err}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: interval file is not UTF-8 text") from None
    raw = parse_json(text, str(path))
    if not isinstance(raw, dict) or raw.get("schema_version") != SCHEMA_VERSION or not isinstance(raw.get("runs"), list):
        got = raw.get("schema_version") if isinstance(raw, dict) else type(raw).__name__
        raise ConfigError(f"{path}: not an interval file of schema_version {SCHEMA_VERSION} (schema_version: {got!r})")
    rows = []
    for i, r in enumerate(raw["runs"]):
        where = f"{path}: runs[{i}]"
        strings = ("id", "family", "signature", "group", "gpu", "cluster", "model", "ep_backend", "precision")
        if not isinstance(r, dict) or not all(isinstance(r.get(k), str) for k in strings):
            raise ConfigError(f"{where} must have string {', '.join(strings)}, got {r!r}")
        gpus = r.get("gpus")
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise ConfigError(f"{where}.gpus must be a positive integer, got {gpus!r}")
        launch, schedule = r.get("launch", ""), r.get("schedule", "")
        if not isinstance(launch, str):
            raise ConfigError(f"{where}.launch must be a string, got {launch!r}")
        if not isinstance(schedule, str):
            raise ConfigError(f"{where}.schedule must be a string, got {schedule!r}")
        logo = r.get("logo_predicted_tokens_per_s_per_gpu")
        rows.append(ResidualRow(
            r["id"], r["family"], r["signature"],
            _positive(f"{where}.predicted_tokens_per_s_per_gpu", r.get("predicted_tokens_per_s_per_gpu")),
            _positive(f"{where}.measured_tokens_per_s_per_gpu", r.get("measured_tokens_per_s_per_gpu")),
            group=r["group"], gpu=r["gpu"], cluster=r["cluster"], gpus=gpus, model=r["model"],
            ep_backend=r["ep_backend"], precision=r["precision"], launch=launch, schedule=schedule,
            logo_predicted_tokens_per_s_per_gpu=(None if logo is None else
                                                 _positive(f"{where}.logo_predicted_tokens_per_s_per_gpu", logo)),
            step_s=_positive(f"{where}.step_s", r.get("step_s", 0.0), zero_ok=True),
            boundary_s=_positive(f"{where}.boundary_s", r.get("boundary_s", 0.0), zero_ok=True)))
    prov = raw.get("provenance", {})
    return IntervalData(SCHEMA_VERSION, tuple(rows), prov if isinstance(prov, dict) else {}, str(path))


@cache
def _load_cached(path: str) -> tuple[IntervalData | None, str]:
    try:
        return load(path), ""
    except ConfigError as err:
        return None, str(err)


def load_shipped(path: str | Path | None = None) -> IntervalData | None:
    """The interval file at ``path`` (default: the shipped one), read once per process; None when it is
    missing or unreadable (:func:`interval_note` says why)."""
    return _load_cached(str(path or INTERVALS_FILE))[0]


def interval_note(path: str | Path | None = None) -> str:
    """Why there is no interval (empty when the file loads)."""
    err = _load_cached(str(path or INTERVALS_FILE))[1]
    return f"note: no interval: {err} (regenerate with `{REGENERATE}`)" if err else ""
