"""Intervals by distance from the evidence (issue 28): a measured group, a new group and beyond the envelope
get wider intervals in that order; every prediction carries its evidence; validate reports leave-one-group-out
coverage and checks a user's own runs against ``--threshold PCT``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sim import interval_data
from sim.catalog import load_cluster, load_model
from sim.errors import ConfigError
from sim.loaders import derive_plan_fields, plan_from_mapping
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.uncertainty import (
    BEYOND_FACTOR,
    DISTANCES,
    GROUP_FACTOR,
    Interval,
    boundary_band,
    classify,
    distance_interval,
    logo_interval_coverage,
    prediction_interval,
    with_boundary_band,
)

ROOT = Path(__file__).resolve().parents[2]
DEEPSEEK = ["predict", "--model", "deepseek-v3-671b", "--gpu", "h800", "--gpus", "2048", "--stack", "deepseek",
            "--pp", "16", "--pp-schedule", "dualpipe", "--ep", "64", "--tp", "1", "--seq-len", "4096",
            "--global-batch", "15360", "--precision", "fp8-blockwise", "--ep-backend", "deepep", "--ac", "selective"]
#: The README's Megatron DeepSeek-V3 plan (256 GPUs, PP4 x VPP4, EP64, MXFP8, HybridEP)
MEGATRON_PLAN = plan_from_mapping(derive_plan_fields(
    {"pp": 4, "vpp": 4, "ep": 64, "seq_len": 4096, "global_batch": 4096, "ac": "selective", "precision": "mxfp8",
     "ep_backend": "hybridep"}, 256), "test plan")


def _data() -> interval_data.IntervalData:
    data = interval_data.load_shipped()
    assert data is not None, interval_data.interval_note()
    return data


def _ratio(iv: object) -> float:
    return iv.p90 / iv.p10  # type: ignore[attr-defined]


def test_widths_grow_with_distance_on_the_shipped_evidence() -> None:
    data = _data()
    group = [r.log_residual for r in data.runs if r.cluster == "hgx-b200" and r.family == "megatron"]
    pool = [r.log_residual for r in data.runs]
    logo = [r.logo_log_residual for r in data.runs if math.isfinite(r.logo_log_residual)]
    ivs = [distance_interval(1000.0, d, group, pool, logo) for d in DISTANCES]
    assert _ratio(ivs[0]) < _ratio(ivs[1]) < _ratio(ivs[2])
    assert [iv.distance for iv in ivs] == list(DISTANCES)
    centre = 1000.0 * math.exp(ivs[2].mean_log_residual)  # new: the LOGO half-width x GROUP_FACTOR; beyond: x BEYOND_FACTOR
    logo_only = distance_interval(1000.0, DISTANCES[1], group, pool, logo, widen=1.0)
    half_logo = max(math.log(logo_only.p90 / centre), math.log(centre / logo_only.p10))
    assert max(math.log(ivs[1].p90 / centre), math.log(centre / ivs[1].p10)) == pytest.approx(half_logo * GROUP_FACTOR)
    assert max(math.log(ivs[2].p90 / centre), math.log(centre / ivs[2].p10)) == pytest.approx(half_logo * BEYOND_FACTOR)
    for iv in ivs:
        assert iv.point == 1000.0 and iv.p10 <= 1000.0 <= iv.p90


def test_a_plan_is_placed_by_class_stack_scale_backend_and_precision() -> None:
    runs = _data().runs
    assert classify(runs, "hgx-b200", "megatron", 256, "hybridep", "mxfp8").distance == "measured group"
    assert classify(runs, "hgx-b200", "megatron", 16, "hybridep", "mxfp8").distance == "measured group"  # 2x of 8
    between = classify(runs, "hgx-b200", "megatron", 64, "hybridep", "mxfp8")  # outside [0.5x, 2x] of 8 and 256
    assert between.distance == "new group" and "outside [0.5x, 2x]" in between.reasons[0]
    assert classify(runs, "hgx-b300", "torchtitan", 256, "hybridep", "mxfp8").distance == "new group"  # a new stack
    largest = max(r.gpus for r in runs if r.cluster == "gb200-nvl72")
    far = classify(runs, "gb200-nvl72", "megatron", 2 * largest + 72, "hybridep", "mxfp8")
    assert far.distance == "beyond the envelope" and "beyond 2x the largest" in far.reasons[0]
    odd = classify(runs, "gb200-nvl72", "megatron", 256, "deepep", "mxfp8")
    assert odd.distance == "beyond the envelope" and "EP backend deepep was never measured" in odd.reasons[0]


def test_a_launch_mode_never_measured_on_the_class_lies_beyond_the_envelope() -> None:
    """Full-iteration CUDA graphs were measured on GB200 (MLPerf's fitted pair), never on GB300: a GB300 plan with
    them is placed beyond the envelope, naming the modes measured there, and its interval is the wider one."""
    runs = _data().runs
    assert {r.launch for r in runs} >= {"compiled", "partial", "graphs"}
    assert classify(runs, "gb200-nvl72", "megatron", 512, "hybridep", "mxfp8", launch="graphs").distance == "measured group"
    far = classify(runs, "gb300-nvl72", "megatron", 256, "hybridep", "mxfp8", launch="graphs")
    assert far.distance == "beyond the envelope"
    assert far.reasons[0].startswith("launch mode graphs was never measured on gb300-nvl72 (measured: ")
    assert classify(runs, "gb300-nvl72", "megatron", 256, "hybridep", "mxfp8", launch="partial").distance == "measured group"
    model, cluster = load_model("deepseek-v3-671b"), load_cluster("gb300-nvl72", n_gpus=256)
    full = predict(model, cluster, dataclasses.replace(MEGATRON_PLAN, cuda_graphs="full"), stack="megatron")
    partial = predict(model, cluster, dataclasses.replace(MEGATRON_PLAN, cuda_graphs="partial"), stack="megatron")
    assert (full.launch, partial.launch) == ("graphs", "partial")
    iv_full, iv_partial = prediction_interval(full, data=_data()), prediction_interval(partial, data=_data())
    assert iv_full is not None and iv_partial is not None
    assert iv_full.distance == "beyond the envelope" and iv_partial.distance == "measured group"
    assert _ratio(iv_full) > _ratio(iv_partial)


def _shipped_file_with(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """The shipped interval data written to ``tmp_path`` with ``change`` applied to every run row."""
    raw = json.loads(interval_data.to_json(_data()))
    for row in raw["runs"]:
        change(row)
    path = tmp_path / "changed.json"
    path.write_text(json.dumps(raw))
    return path


def test_an_interval_file_without_launch_modes_places_plans_as_before(tmp_path: Path) -> None:
    """Files written before the launch mode was stored load, and no plan is placed by a mode they do not record."""
    old = interval_data.load(_shipped_file_with(tmp_path, lambda row: row.pop("launch")))
    assert {r.launch for r in old.runs} == {""}
    assert classify(old.runs, "gb300-nvl72", "megatron", 256, "hybridep", "mxfp8", launch="graphs").distance == \
        "measured group"


def test_an_ep_schedule_never_measured_on_the_class_lies_beyond_the_envelope(tmp_path: Path) -> None:
    """Megatron's EP overlap (combined 1F1B) was measured on H100 and GB200 (Qwen3-235B, MLPerf), never on B300: a
    B300 plan that turns it on is placed beyond the envelope, naming the schedule measured there, with the wider
    interval; the same plan without it stays in its measured group. Files written before the schedule was stored
    place plans as before."""
    runs = _data().runs
    assert {r.schedule for r in runs} == {"ep-overlap", "sequential"}
    assert {r.cluster for r in runs if r.schedule == "ep-overlap"} >= {"hgx-h100", "gb200-nvl72"}
    assert classify(runs, "hgx-h100", "megatron", 256, "nccl", "fp8-current", schedule="ep-overlap").distance == \
        "measured group"
    far = classify(runs, "hgx-b300", "megatron", 256, "hybridep", "mxfp8", schedule="ep-overlap")
    assert far.distance == "beyond the envelope"
    assert far.reasons == ("EP schedule ep-overlap was never measured on hgx-b300 (measured: sequential)",)
    model, cluster = load_model("deepseek-v3-671b"), load_cluster("hgx-b300", n_gpus=256)
    plan = plan_from_mapping(derive_plan_fields(
        {"pp": 8, "vpp": 2, "ep": 8, "seq_len": 4096, "global_batch": 4096, "ac": "selective", "precision": "mxfp8",
         "ep_backend": "hybridep"}, 256), "test plan")
    overlapped = predict(model, cluster, dataclasses.replace(plan, ep_overlap=True), stack="megatron")
    sequential = predict(model, cluster, plan, stack="megatron")
    iv_over, iv_seq = prediction_interval(overlapped, data=_data()), prediction_interval(sequential, data=_data())
    assert iv_over is not None and iv_seq is not None
    assert (iv_over.distance, iv_seq.distance) == ("beyond the envelope", "measured group")
    assert "EP schedule ep-overlap" in str(iv_over.evidence["note"])
    assert _ratio(iv_over) > _ratio(iv_seq)
    old = interval_data.load(_shipped_file_with(tmp_path, lambda row: row.pop("schedule")))
    assert {r.schedule for r in old.runs} == {""}
    assert classify(old.runs, "hgx-b300", "megatron", 256, "hybridep", "mxfp8", schedule="ep-overlap").distance == \
        "measured group"
    with pytest.raises(ConfigError, match=r"runs\[0\]\.schedule must be a string"):
        interval_data.load(_shipped_file_with(tmp_path, lambda row: row.update(schedule=1)))


def test_hgx_b200_megatron_is_narrower_than_nvl72_gb300() -> None:
    model = load_model("deepseek-v3-671b")
    ivs = {}
    for gpu, template in (("b200", "hgx-b200"), ("gb300", "gb300-nvl72")):
        pred = predict(model, load_cluster(template, n_gpus=256), MEGATRON_PLAN, stack="megatron")
        iv = prediction_interval(pred, data=_data())
        assert iv is not None and iv.evidence is not None
        ivs[gpu] = iv
    assert ivs["b200"].evidence["distance"] == "measured group"  # type: ignore[index]
    assert _ratio(ivs["b200"]) < _ratio(ivs["gb300"])


def _cli(*args: str) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "moesim", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_deepseek_2048_h800_interval_contains_the_report_and_carries_its_evidence() -> None:
    rc, out, err = _cli(*DEEPSEEK, "--json")
    assert rc == 0, err
    pred = json.loads(out)["predictions"][0]
    iv, ev = pred["interval"], pred["evidence"]
    assert iv["p10_tokens_per_s_per_gpu"] <= 1543 <= iv["p90_tokens_per_s_per_gpu"]  # DeepSeek-V3 report
    assert ev["distance"] in DISTANCES[1:] and ev["note"] and "outside the validated envelope" in ev["note"]
    assert 1 <= len(ev["nearest"]) <= 3 and all(set(n) == {"id", "error"} for n in ev["nearest"])


def test_every_text_prediction_prints_its_evidence_line() -> None:
    rc, out, err = _cli("predict")
    assert rc == 0, err
    names = [line.split(": p10-p90")[0] for line in out.splitlines() if ": p10-p90" in line]
    evidence = [line for line in out.splitlines() if ": evidence: " in line]
    assert names and len(evidence) == len(names)
    assert all("nearest measured:" in line for line in evidence)


def test_logo_interval_coverage_on_the_shipped_runs_meets_the_target() -> None:
    from studies.validate import logo_intervals, logo_validation

    cov = logo_intervals(logo_validation())
    assert cov["runs"] >= 20
    assert cov["logo_interval_coverage"] >= 0.75 and cov["median_p90_p10_ratio"] <= 1.6, cov
    for row in cov["rows"]:  # each built from the other groups only
        assert row["other_groups_runs"] < cov["runs"]


def test_logo_interval_coverage_uses_only_the_other_groups() -> None:
    rows = [{"id": "a1", "group": "a", "predicted": 100.0, "measured": 200.0},
            {"id": "a2", "group": "a", "predicted": 100.0, "measured": 200.0},
            {"id": "b1", "group": "b", "predicted": 100.0, "measured": 101.0},
            {"id": "b2", "group": "b", "predicted": 100.0, "measured": 99.0},
            {"id": "c1", "group": "c", "predicted": 100.0, "measured": 100.5}]
    out = logo_interval_coverage(rows)
    by = {r["id"]: r for r in out["rows"]}
    assert by["a1"]["other_groups_runs"] == 3 and by["a1"]["covered"] is False  # its own group's +100% unseen
    assert by["b1"]["other_groups_runs"] == 3
    assert out["runs"] == 5 and out["logo_interval_coverage"] == pytest.approx(out["covered"] / 5)


RUN = """
[[run]]
id = "{rid}"
model = "debug"
gpu = "b200"
gpus = 8
cluster = "hgx-b200"
stack = "torchtitan"
release = "x"
measured_tokens_per_s_per_gpu = {measured}
source = "a test"
[run.plan]
ep = 4
seq_len = 512
global_batch = 16
"""


def _validate(dataset: Path, threshold: str | None, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    from moesim.validate_cmd import run_validate

    ns = argparse.Namespace(dataset=str(dataset), threshold=threshold, json=True, write_intervals=None)
    rc = run_validate(ns)
    return rc, json.loads(capsys.readouterr().out)


def test_a_users_runs_get_intervals_and_a_percentage_threshold(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    pred = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
                   ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512), stack="torchtitan")
    f = tmp_path / "mine.toml"
    f.write_text(RUN.format(rid="slow", measured=pred.tokens_per_s_per_gpu / 1.18))  # predicted +18%
    rc, out = _validate(f, "10", capsys)
    assert rc == 1 and len(out["threshold_failures"]) == 1 and "slow: error +18.0%" in out["threshold_failures"][0]
    row = out["rows"][0]
    assert row["interval"] is not None and row["interval"][0] <= row["predicted_tokens_per_s_per_gpu"] <= row["interval"][1]
    assert "logo_interval_coverage" in out and "median_p90_p10_ratio" in out
    rc, out = _validate(f, "25%", capsys)
    assert rc == 0 and out["threshold_failures"] == []
    from moesim.validate_cmd import run_validate

    rc = run_validate(argparse.Namespace(dataset=str(f), threshold="-5", json=True, write_intervals=None))
    err = capsys.readouterr().err
    assert rc == 2 and "--threshold" in err and err.count("\n") == 1


def _qwen3_30b_on_8_b200(global_batch: int) -> Any:
    """Qwen3-30B on 8 B200 with Megatron at the fitted runs' plan shape (EP8, MBS 4), ``global_batch`` sequences."""
    plan = plan_from_mapping(derive_plan_fields(
        {"ep": 8, "seq_len": 4096, "global_batch": global_batch, "micro_batch": 4, "precision": "mxfp8",
         "ep_backend": "hybridep"}, 8), "test plan")
    return predict(load_model("qwen3-30b-a3b"), load_cluster("hgx-b200", n_gpus=8), plan, stack="megatron")


def test_the_step_boundary_widens_an_interval_by_its_share_of_the_step() -> None:
    """The unidentified step boundary's measured spread (1.6-2.6 s on the fitted runs) weighs on a short step, not
    on a long one: the plan with 8 microbatches a step gets a wider interval than the same plan with 128, both carry
    the band, and only the short one's note names the boundary's share."""
    short, long = _qwen3_30b_on_8_b200(64), _qwen3_30b_on_8_b200(1024)
    assert short.breakdown["step_fixed"] == long.breakdown["step_fixed"] > 0
    iv_short, iv_long = prediction_interval(short, data=_data()), prediction_interval(long, data=_data())
    assert iv_short is not None and iv_long is not None
    assert iv_short.distance == iv_long.distance == "measured group"
    low, high = iv_short.boundary_band_s or (math.nan, math.nan)
    assert 1.0 < low < short.breakdown["step_fixed"] < high < 3.5
    assert _ratio(iv_short) > 1.05 * _ratio(iv_long)
    assert "step boundary" in str(iv_short.evidence["note"])  # type: ignore[index]
    assert "step boundary" not in str(iv_long.evidence["note"])  # type: ignore[index]
    assert iv_short.to_dict()["step_boundary_band_s"] == [low, high]


def test_a_step_of_one_microbatch_carries_no_boundary_band() -> None:
    one = _qwen3_30b_on_8_b200(32)  # 32 sequences = 8 ranks x MBS 4: one microbatch, no boundary charged
    assert one.breakdown.get("step_fixed", 0.0) == 0.0
    iv = prediction_interval(one, data=_data())
    assert iv is not None and iv.boundary_band_s is None and "step_boundary_band_s" not in iv.to_dict()


def test_beyond_the_envelope_the_boundary_may_be_none() -> None:
    """Beyond the envelope the band opens down to 0 s (full-iteration-graph GB300 steps spend 0-0.3 s)."""
    iv = Interval(90.0, 100.0, 110.0, 5, "megatron", 0.0, 0.05)
    inside = with_boundary_band(iv, 4.0, 2.0, (1.5, 2.6), beyond=False)
    beyond = with_boundary_band(iv, 4.0, 2.0, (1.5, 2.6), beyond=True)
    assert inside.boundary_band_s == (1.5, 2.6) and beyond.boundary_band_s == (0.0, 2.6)
    assert beyond.p90 > inside.p90 and beyond.p10 == inside.p10
    # a step with none of its time at the boundary (0 s of 2 s) runs 2x: the p90 reaches at least that
    assert beyond.p90 >= 2 * iv.point
    assert with_boundary_band(iv, 4.0, 2.0, None, beyond=True) is iv


def test_the_boundary_band_reads_only_steps_it_is_a_measurable_part_of() -> None:
    """A 208 s step's 2 s boundary is lost in the rest of the model's error: such rows do not set the band."""
    from types import SimpleNamespace as R

    short = [R(boundary_s=2.0, step_s=10.0, boundary_gap_s=g) for g in (1.6, 1.8, 2.0, 2.2, 2.4)]
    long = [R(boundary_s=2.0, step_s=208.0, boundary_gap_s=-30.0)] * 5
    assert boundary_band(short + long) == boundary_band(short)
    assert boundary_band(long) is None
    gaps = [r.boundary_gap_s for r in _data().runs if r.boundary_gap_s is not None]
    assert len(gaps) >= 20 and boundary_band(_data().runs) is not None


def test_an_interval_file_without_steps_has_no_band_and_bad_steps_are_refused(tmp_path: Path) -> None:
    old = interval_data.load(_shipped_file_with(tmp_path, lambda row: (row.pop("step_s"), row.pop("boundary_s"))))
    assert all(r.boundary_gap_s is None for r in old.runs) and boundary_band(old.runs) is None
    with pytest.raises(ConfigError, match=r"runs\[0\]\.step_s must be a non-negative finite number"):
        interval_data.load(_shipped_file_with(tmp_path, lambda row: row.update(step_s=-1.0)))
    with pytest.raises(ConfigError, match=r"runs\[0\]\.boundary_s must be a non-negative finite number"):
        interval_data.load(_shipped_file_with(tmp_path, lambda row: row.update(boundary_s="2")))
