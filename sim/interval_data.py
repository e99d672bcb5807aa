"""The residuals prediction intervals are built from, as a versioned data file with provenance.

``moesim validate --write-intervals`` predicts every held-out run of the measured-runs dataset once and
writes ``sim/data/intervals.json``: per run its id, stack family, signature (model, GPU, GPU count, plan,
stack: how a later prediction of the same run is recognised, so its own residual is left out), predicted
and measured tokens/s per GPU and ``log(measured / predicted)``; and the provenance (dataset and its
SHA-256, moesim version, ``git describe``, a hash of the simulator's sources and tables, the runs left
out and why). :func:`load_shipped` reads it once per process; a prediction never re-predicts the dataset.
``tests/sim/test_interval_data.py`` fails when the stored file is stale against today's predictions.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

__all__ = ["SCHEMA_VERSION", "INTERVALS_FILE", "ResidualRow", "IntervalData", "run_signature", "build",
           "write", "load", "load_shipped", "interval_note", "dataset_sha256", "sources_sha256"]

#: Version of the file's layout.
SCHEMA_VERSION = 1
#: The shipped file (read as a file: sim imports nothing from studies).
INTERVALS_FILE = Path(__file__).resolve().parent / "data" / "intervals.json"
_SIM_DIR = Path(__file__).resolve().parent
REGENERATE = "moesim validate --write-intervals"


@dataclass(frozen=True)
class ResidualRow:
    """One held-out measured run as predicted when the file was written."""

    id: str
    family: str
    signature: str
    predicted_tokens_per_s_per_gpu: float
    measured_tokens_per_s_per_gpu: float

    @property
    def log_residual(self) -> float:
        """``log(measured / predicted)``."""
        return math.log(self.measured_tokens_per_s_per_gpu / self.predicted_tokens_per_s_per_gpu)


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


def build(dataset: str | Path | None = None) -> IntervalData:
    """Predict every held-out run of ``dataset`` (default: the shipped one) with its own stack profile."""
    from sim.measured_runs import MEASURED_RUNS
    from sim.uncertainty import held_out_predictions, stack_family

    path = Path(dataset) if dataset is not None else MEASURED_RUNS
    rows = []
    predicted, skipped = held_out_predictions(path)
    for run, pred in predicted:
        sig = run_signature(pred.model, pred.gpu, pred.n_gpus, pred.plan, pred.stack, pred.stack_release)
        rows.append(ResidualRow(run.id, stack_family(run.stack), sig, float(pred.tokens_per_s_per_gpu),
                                float(run.measured_tokens_per_s_per_gpu)))
    from importlib.metadata import PackageNotFoundError, version

    try:
        moesim_version = version("moesim")
    except PackageNotFoundError:
        moesim_version = "0.0.0+unknown"
    provenance = {"dataset": path.name if path == MEASURED_RUNS else str(path), "dataset_sha256": dataset_sha256(path),
                  "moesim_version": moesim_version, "git_describe": _git_describe(),
                  "sim_sources_sha256": sources_sha256(), "runs_left_out": skipped, "written_by": REGENERATE}
    return IntervalData(SCHEMA_VERSION, tuple(rows), provenance, str(path))


def to_json(data: IntervalData) -> str:
    """The file's text."""
    return json.dumps({"schema_version": data.schema_version, "provenance": data.provenance,
                       "runs": [{"id": r.id, "family": r.family, "signature": r.signature,
                                 "predicted_tokens_per_s_per_gpu": r.predicted_tokens_per_s_per_gpu,
                                 "measured_tokens_per_s_per_gpu": r.measured_tokens_per_s_per_gpu,
                                 "log_residual": r.log_residual} for r in data.runs]}, indent=1) + "\n"


def write(data: IntervalData, path: str | Path = INTERVALS_FILE) -> Path:
    """Write ``data`` atomically to ``path``."""
    from sim.fileio import write_atomic

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, to_json(data))
    return Path(path)


def _positive(where: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not (0 < v < math.inf):
        raise ConfigError(f"{where} must be a positive finite number, got {v!r}")
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
        if not isinstance(r, dict) or not all(isinstance(r.get(k), str) for k in ("id", "family", "signature")):
            raise ConfigError(f"{where} must have string id, family and signature, got {r!r}")
        rows.append(ResidualRow(r["id"], r["family"], r["signature"],
                                _positive(f"{where}.predicted_tokens_per_s_per_gpu", r.get("predicted_tokens_per_s_per_gpu")),
                                _positive(f"{where}.measured_tokens_per_s_per_gpu", r.get("measured_tokens_per_s_per_gpu"))))
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
