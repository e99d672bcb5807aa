"""Every refusal of a malformed measured-runs file names the file, the run and the field: each field and
each plan field of the shipped dataset's first runs of every stack, one at a time given a value of the
wrong type, is refused with a message naming all three (and the value, for the run's own fields)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from sim.errors import ConfigError
from studies.dataset import default_dataset_path, load_runs


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _dump(runs: list[dict[str, Any]]) -> str:
    out = []
    for run in runs:
        out.append("[[run]]")
        out += [f"{k} = {_toml_value(v)}" for k, v in run.items() if k != "plan"]
        out.append("[run.plan]")
        out += [f"{k} = {_toml_value(v)}" for k, v in run.get("plan", {}).items()]
    return "\n".join(out) + "\n"


def _runs() -> list[dict[str, Any]]:
    runs = tomllib.loads(default_dataset_path().read_text(encoding="utf-8"))["run"]
    first: dict[str, dict[str, Any]] = {}
    for run in runs:  # the first run of each stack, and the runs they name as baselines
        first.setdefault(run["stack"], run)
    keep = {r["id"] for r in first.values()} | {r["baseline"] for r in first.values() if "baseline" in r}
    return [r for r in runs if r["id"] in keep]


def _wrong(value: Any) -> Any:
    return 7 if isinstance(value, str) else "seven"


RUNS = _runs()
CASES = [(i, key) for i, run in enumerate(RUNS) for key in run if key != "plan"]
CASES += [(i, f"plan.{key}") for i, run in enumerate(RUNS) for key in run.get("plan", {})]


def test_the_dump_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    path.write_text(_dump(RUNS), encoding="utf-8")
    assert [r.id for r in load_runs(path)] == [r["id"] for r in RUNS]
    assert len({r["stack"] for r in RUNS}) >= 2


@pytest.mark.parametrize(("index", "key"), CASES, ids=[f"{RUNS[i]['id']}:{k}" for i, k in CASES])
def test_a_field_of_the_wrong_type_is_refused_naming_the_file_the_run_and_the_field(
        tmp_path: Path, index: int, key: str) -> None:
    runs = json.loads(json.dumps(RUNS))
    holder = runs[index]["plan"] if key.startswith("plan.") else runs[index]
    field = key.removeprefix("plan.")
    holder[field] = bad = _wrong(holder[field])
    path = tmp_path / "broken-runs.toml"
    path.write_text(_dump(runs), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_runs(path)
    message = str(err.value)
    run_id = runs[index]["id"] if field != "id" else bad
    assert message.startswith(f"{path}: run {run_id!r}"), message
    assert field in message, message
    if not key.startswith("plan."):
        assert repr(bad) in message, message
