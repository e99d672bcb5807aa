"""Intervals as data: the stored residuals are today's, loaded without re-predicting, leave-one-out, and every
interval contains its own prediction."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest

from sim import interval_data
from sim.catalog import load_cluster, load_model
from sim.errors import ConfigError
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.uncertainty import prediction_interval
from studies.dataset import MEASURED_RUNS

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_interval_file_is_fresh_against_todays_predictions() -> None:
    """Fails when the code, the joint fit or the dataset changed the runs' in-sample or leave-one-group-out
    predictions: rerun ``moesim validate --write-intervals`` and commit sim/data/intervals.json."""
    from studies.validate import logo_validation

    stored = interval_data.load(interval_data.INTERVALS_FILE)
    assert stored.provenance["dataset_sha256"] == interval_data.dataset_sha256(MEASURED_RUNS), (
        "studies/data/measured_runs.toml changed: run `moesim validate --write-intervals`")
    logo = logo_validation()
    today = interval_data.build(MEASURED_RUNS, logo["runs"])
    fresh = {r.id: r for r in today.runs}

    def off(a: float | None, b: float | None) -> bool:
        return (a is None) != (b is None) or (a is not None and b is not None and abs(a / b - 1) > 1e-9)

    stale = {s.id: (s.predicted_tokens_per_s_per_gpu, s.logo_predicted_tokens_per_s_per_gpu)
             for s in stored.runs if s.id not in fresh or s.signature != fresh[s.id].signature
             or off(s.predicted_tokens_per_s_per_gpu, fresh[s.id].predicted_tokens_per_s_per_gpu)
             or off(s.logo_predicted_tokens_per_s_per_gpu, fresh[s.id].logo_predicted_tokens_per_s_per_gpu)}
    assert [r.id for r in today.runs] == [r.id for r in stored.runs] and not stale, (
        f"sim/data/intervals.json is stale (stored in-sample, LOGO): {stale}; run `moesim validate --write-intervals`")


def test_every_run_is_stored_with_its_group_class_scale_backend_precision_and_logo_residual() -> None:
    data = interval_data.load(interval_data.INTERVALS_FILE)
    from studies.dataset import load_runs

    runs = {r.id: r for r in load_runs()}
    assert {r.id for r in data.runs} == set(runs)  # every measured run, fitted or not: the joint fit saw them all
    for row in data.runs:
        run = runs[row.id]
        assert (row.gpu, row.cluster, row.gpus, row.model) == (run.gpu, run.cluster, run.gpus, run.model)
        assert row.group == f"{run.cluster} x {run.stack}" and row.family == run.stack.split("-")[0]
        assert row.ep_backend and row.precision
        assert row.logo_predicted_tokens_per_s_per_gpu is not None, row.id
        assert row.logo_log_residual == pytest.approx(
            math.log(row.measured_tokens_per_s_per_gpu / row.logo_predicted_tokens_per_s_per_gpu))
    assert data.provenance["sim_sources_sha256"] and "logo_source" in data.provenance


def test_every_measured_run_leaves_its_own_residual_out_and_lies_inside_its_interval() -> None:
    from sim.stacks import profile_for
    from studies.dataset import load_runs, resolve_run

    data = interval_data.load_shipped()
    assert data is not None
    for run in load_runs():
        model, cluster, plan = resolve_run(run)
        pred = predict(model, cluster, plan, stack=profile_for(run.stack, run.release))
        iv = prediction_interval(pred, data=data, cluster=run.cluster)
        assert iv is not None and iv.p10 <= pred.tokens_per_s_per_gpu <= iv.p90, run.id
        own = iv.left_out.split(", ")  # the run, and any run of the very same inputs
        assert run.id in own and all(r.signature == interval_data.run_signature(
            pred.model, pred.gpu, pred.n_gpus, pred.plan, pred.stack, pred.stack_release)
            for r in data.runs if r.id in own), run.id
        assert iv.evidence is not None and iv.evidence["distance"] == "measured group", run.id  # it was measured
        assert iv.evidence["nearest"][0]["id"] in own  # nearest to itself, with its LOGO error
        assert iv.n_runs == len(data.runs) - len(own), run.id  # the pool: every other run


def _random_plans(n: int, seed: int = 15) -> list[tuple[ParallelPlan, str, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        gpus = rng.choice([8, 16, 32])
        pp = rng.choice([1, 2])
        ep = rng.choice([e for e in (1, 2, 4, 8) if (gpus // pp) % e == 0])
        stack = rng.choice(["torchtitan", "megatron"])
        plan = ParallelPlan(pp=pp, ep=ep, dp_shard=gpus // pp, seq_len=rng.choice([256, 512]),
                            global_batch=(gpus // pp) * rng.choice([2, 4]), ac=rng.choice(["none", "full"]),
                            ep_backend=rng.choice(["nccl", "deepep"]), precision=rng.choice(["bf16", "mxfp8-grouped"]))
        out.append((plan, stack, gpus))
    return out


def test_200_random_plans_lie_inside_their_own_interval() -> None:
    model = load_model("debug")
    data = interval_data.load_shipped()
    checked = 0
    for plan, stack, gpus in _random_plans(200):
        pred = predict(model, load_cluster("hgx-b200", n_gpus=gpus), plan, stack=stack)
        iv = prediction_interval(pred, data=data, calibration_sd=random.Random(checked).uniform(0.0, 0.1))
        assert iv is not None and iv.p10 <= pred.tokens_per_s_per_gpu <= iv.p90, (plan, stack)
        assert iv.point == pred.tokens_per_s_per_gpu  # the printed point is the model's, never shifted
        checked += 1
    assert checked == 200


def test_load_rejects_files_that_are_not_interval_files(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"schema_version": 99, "runs": []}')
    with pytest.raises(ConfigError, match="schema_version"):
        interval_data.load(bad)
    row = {"id": "a", "family": "f", "signature": "s", "group": "c x f", "gpu": "b200", "cluster": "c", "gpus": 8,
           "model": "m", "ep_backend": "nccl", "precision": "bf16", "predicted_tokens_per_s_per_gpu": -1,
           "measured_tokens_per_s_per_gpu": 1}
    bad.write_text(json.dumps({"schema_version": interval_data.SCHEMA_VERSION, "runs": [row]}))
    with pytest.raises(ConfigError, match=r"runs\[0\]\.predicted_tokens_per_s_per_gpu"):
        interval_data.load(bad)
    bad.write_text(json.dumps({"schema_version": interval_data.SCHEMA_VERSION,
                               "runs": [{**row, "predicted_tokens_per_s_per_gpu": 1, "gpus": 0}]}))
    with pytest.raises(ConfigError, match=r"runs\[0\]\.gpus"):
        interval_data.load(bad)
    bad.write_text(json.dumps({"schema_version": interval_data.SCHEMA_VERSION,
                               "runs": [{**row, "predicted_tokens_per_s_per_gpu": 1, "launch": 3}]}))
    with pytest.raises(ConfigError, match=r"runs\[0\]\.launch must be a string, got 3"):
        interval_data.load(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        interval_data.load(tmp_path / "missing.json")
    assert interval_data.load_shipped(tmp_path / "missing.json") is None
    assert "no interval" in interval_data.interval_note(tmp_path / "missing.json")
    assert interval_data.interval_note() == ""


def test_write_then_load_round_trips(tmp_path: Path) -> None:
    data = interval_data.load(interval_data.INTERVALS_FILE)
    out = interval_data.write(data, tmp_path / "iv.json")
    again = interval_data.load(out)
    assert again.runs == data.runs and again.provenance == data.provenance


def _cli(*args: str) -> tuple[int, str, str]:
    import subprocess

    p = subprocess.run([sys.executable, "-m", "moesim", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_predict_with_a_bad_interval_file_exits_2_and_never_imports_the_dataset(tmp_path: Path) -> None:
    rc, out, err = _cli("predict", "--model", "debug", "--gpus", "8", "--ep", "4", "--seq-len", "512",
                        "--intervals", str(tmp_path / "nope.json"))
    assert rc == 2 and out == "" and err.count("\n") == 1 and "nope.json" in err and "Traceback" not in err


def test_the_shipped_file_is_exactly_what_the_writer_writes_for_its_own_contents() -> None:
    """Reading the file and writing it back changes no byte: the file is the writer's, not hand-edited, and
    the reader keeps every field the writer wrote."""
    text = interval_data.INTERVALS_FILE.read_text(encoding="utf-8")
    assert interval_data.to_json(interval_data.load(interval_data.INTERVALS_FILE)) == text
