"""Behaviours of what a prediction reports (issue 30 item 5; the gaps seed 8191's survivors pointed at): the
breakdown's entries, a ring's link, a calibration document's notes, a synthetic trace's durations."""

from __future__ import annotations

import json

import pytest

from calibrate.document import build_document
from calibrate.synthetic import TRUE_GEMM, synthetic_trace
from sim.calibration import parse_calibration
from sim.catalog import load_cluster, load_model
from sim.comm import CommCosts
from sim.comm.collectives import ring_cost
from sim.predict import predict
from sim.specs import ParallelPlan


@pytest.mark.parametrize("plan", [ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512),
                                  ParallelPlan(pp=2, ep=4, dp_shard=4, global_batch=16, seq_len=512)])
def test_the_breakdown_holds_no_zero_entries_but_the_bubble(plan: ParallelPlan) -> None:
    """Every category is a positive number of seconds, except the pipeline bubble, which is always reported."""
    p = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8), plan)
    assert "pipeline_bubble" in p.breakdown
    assert all(v > 0 for k, v in p.breakdown.items() if k != "pipeline_bubble")


@pytest.mark.parametrize(("ranks", "link"), [(range(8), "nvlink"), (range(16), "rdma"), ((0, 3, 5), "nvlink"),
                                             ((0, 8), "rdma")])
def test_a_ring_inside_one_nvlink_domain_runs_on_nvlink(ranks: range | tuple[int, ...], link: str) -> None:
    cost = ring_cost(load_cluster("hgx-b200", n_gpus=16), ranks, 1e8, CommCosts.default())
    assert cost.link == link
    assert cost.bound_by == ("nvlink" if link == "nvlink" else "nic")


def test_a_calibration_document_keeps_its_notes() -> None:
    doc = build_document("t", "h800", {"attn_fwd_eff": 0.5}, {"method": "test", "sources": ["x"]},
                         notes=["first note", "second"])
    assert doc["notes"] == ["first note", "second"]
    assert parse_calibration(json.dumps(doc), "t.json").tables["notes"] == ["first note", "second"]
    assert "notes" not in build_document("t", "h800", {}, {"method": "test", "sources": ["x"]})


def test_a_noise_free_synthetic_trace_times_each_gemm_at_its_true_rate() -> None:
    """Without noise, slowdown or SMs held by communication, a dense GEMM of ``size`` FLOPs at efficiency ``eff``
    lasts size / (peak x eff); one that overlaps communication holding 20 of 132 SMs lasts 132/112 times that."""
    peak = 1e15
    events = synthetic_trace(noise=0.0, slowdown=0.0, repeats=1, peak=peak, held_sms=0)
    gemms = [e for e in events if e.get("cat") == "kernel" and e["args"].get("kind") == "gemm"]
    assert len(gemms) == len(TRUE_GEMM)
    for e, (size, eff) in zip(sorted(gemms, key=lambda e: e["args"]["size"]), sorted(TRUE_GEMM), strict=True):
        assert e["args"]["size"] == size
        assert e["dur"] == pytest.approx(size / (peak * eff) * 1e6, rel=1e-9)

    held = synthetic_trace(noise=0.0, slowdown=0.0, repeats=1, peak=peak, held_sms=20, num_sms=132)
    for e in held:
        if e["args"].get("kind") == "gemm":
            eff = dict(TRUE_GEMM)[e["args"]["size"]]
            factor = 132 / 112 if e["args"]["overlap"] else 1.0
            assert e["dur"] == pytest.approx(e["args"]["size"] / (peak * eff) * 1e6 * factor, rel=1e-9)
