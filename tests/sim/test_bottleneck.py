"""What bounds a prediction (issue 28, item 3): ``bottleneck`` and ``comm[kind]`` on every prediction, each
all-to-all backend's :class:`~sim.comm.CommCost` from the same numbers as its time, and the 2x-NIC answer
of NCCL vs DeepEP explained by ``bound_by``."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from moesim.predict_cmd import main as predict_main
from sim import comm
from sim.catalog import load_cluster, load_model
from sim.comm import CommCosts, moe_alltoall
from sim.joint import shipped_values
from sim.predict import predict
from sim.predict.breakdown import BOTTLENECKS
from sim.specs import ParallelPlan
from sim.stacks import load_stack
from sim.trace import chrome_trace_events
from sim.workload import Workload

README = Path(__file__).resolve().parents[2] / "README.md"
BOTTLENECK_NAMES = {"compute", *BOTTLENECKS.values()}


def _readme_predict_commands() -> list[list[str]]:
    """Every runnable ``moesim predict`` command of the README (continuation lines joined; the ``...``
    elisions and the user's own scenario file left out), as argument lists."""
    text = README.read_text(encoding="utf-8").replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip().strip("`")
        if not line.startswith("moesim predict") or "..." in line or "my-scenario" in line:
            continue
        args = shlex.split(line.split("#")[0])[2:]
        if args not in out:
            out.append(args)
    return out


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert predict_main([*argv, "--json"] if "--json" not in argv else argv) == 0
    return json.loads(capsys.readouterr().out)


def test_readme_has_predict_commands() -> None:
    cmds = _readme_predict_commands()
    assert [] in cmds and len(cmds) >= 4, cmds


@pytest.mark.parametrize("argv", _readme_predict_commands(), ids=lambda a: " ".join(a)[:60] or "seed")
def test_every_readme_prediction_says_what_bounds_it(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, argv)
    for p in out["predictions"]:
        assert p["bottleneck"] in BOTTLENECK_NAMES
        assert 0 < p["bottleneck_share"] <= 1
        assert any(k.startswith("moe.") for k in p["comm"]), p["comm"]
        for kind, entry in p["comm"].items():
            assert {"bytes_per_step", "link", "achieved_gbps", "bound_by"} <= set(entry), kind
            assert entry["link"] in comm.LINKS and entry["bound_by"] in comm.BOUND_BY
            assert entry["bytes_per_step"] > 0 and entry["achieved_gbps"] > 0
            assert entry["achieved_gbps"] == pytest.approx(entry["bytes_per_step"] / entry["busy_s"] / 1e9)
            assert entry["bound_by"] == max(entry["terms_s"], key=entry["terms_s"].get)


def _by_backend(out: dict) -> dict[str, dict]:
    return {p["plan"]["ep_backend"]: p for p in out["predictions"] if p["plan"]["precision"] == "bf16"}


def test_nic_doubling_helps_nccl_not_deepep_and_bound_by_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    """The seed scenario (256 B200, EP32 over 4 nodes, 400 Gb/s NICs) with the NIC doubled (--nic-gbps 800).

    NCCL's flat all-to-all sends one copy per selected expert, most of it to other nodes: its time is the
    flows' time on the NIC (a 7.3 ms "nic" term at 400 Gb/s, 3.6 ms at 800, against 41 us of launch + per-peer latency), so doubling the
    NIC halves every dispatch and combine, and the step gains ~27%.

    DeepEP sends each token across RDMA once per remote node (4.8x fewer bytes per step), so its kernel
    is ~1 ms on the NIC ("bound_by" "nic"; under forced balance the notify waits for no spread of arrivals,
    ``ep.arrival_cv_balanced`` = 0). Doubling the NIC halves the "nic" term only down to the SM-limited rate
    of 20 SMs (the "sms" term, 0.76 ms, then the larger: "bound_by" "sms"), so a DeepEP all-to-all gets ~25%
    faster and the step ~2.6%.
    """
    base = _by_backend(_json(capsys, []))
    fast = _by_backend(_json(capsys, ["--nic-gbps", "800"]))
    gain = {b: base[b]["step_time_s"] / fast[b]["step_time_s"] - 1 for b in ("nccl", "deepep")}
    assert gain["nccl"] > 0.2 and gain["deepep"] < 0.05 and gain["nccl"] > 5 * gain["deepep"], gain
    for pred in (base, fast):
        nccl, dep = pred["nccl"]["comm"]["moe.dispatch"], pred["deepep"]["comm"]["moe.dispatch"]
        assert nccl["bound_by"] == "nic" and nccl["link"] == "rdma"
        assert nccl["terms_s"]["nic"] > 50 * nccl["terms_s"]["latency"]
        assert dep["link"] == "rdma"
    assert base["deepep"]["comm"]["moe.dispatch"]["bound_by"] == "nic"
    assert fast["deepep"]["comm"]["moe.dispatch"]["bound_by"] == "sms"
    # NCCL's all-to-all time halves with the NIC; DeepEP's kernel term stops at the SM limit
    n0, n1 = base["nccl"]["comm"]["moe.dispatch"], fast["nccl"]["comm"]["moe.dispatch"]
    assert n1["busy_s"] / n0["busy_s"] == pytest.approx(0.5, abs=0.02)
    d0, d1 = base["deepep"]["comm"]["moe.dispatch"], fast["deepep"]["comm"]["moe.dispatch"]
    assert d0["terms_s"]["nic"] > d0["terms_s"]["sms"] > d1["terms_s"]["nic"]
    assert d1["terms_s"]["sms"] == pytest.approx(d0["terms_s"]["sms"])
    assert d1["busy_s"] / d0["busy_s"] == pytest.approx(d0["terms_s"]["sms"] / d0["terms_s"]["nic"], rel=0.03)
    # both rows are compute-bound steps; the NCCL one less so, its all-to-all being the larger share
    assert base["deepep"]["bottleneck"] == "compute"
    assert base["nccl"]["bottleneck_share"] < base["deepep"]["bottleneck_share"]


def test_bytes_per_step_follow_the_workload() -> None:
    """NCCL dispatches T*K*D*2 bytes per rank per op, all but the 1/P kept locally; one dispatch and one
    combine per MoE layer in the forward, recompute and backward of each microbatch (full recompute); DeepEP
    sends fewer (one copy per remote node, plus its NVLink fan-out)."""
    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    preds = {}
    for backend in ("nccl", "deepep"):
        plan = ParallelPlan(ep=16, dp_shard=16, global_batch=32, seq_len=1024, ep_backend=backend)
        preds[backend] = predict(model, cluster, plan)
    plan = ParallelPlan(ep=16, dp_shard=16, global_batch=32, seq_len=1024)
    tokens = Workload(model, plan, load_stack(None)).tokens_dispatched
    per_op = tokens * model.top_k * model.dim * 2.0 * (plan.ep - 1) / plan.ep
    n_ops = 3 * model.n_moe_layers * plan.n_microbatches
    for kind in ("moe.dispatch", "moe.combine"):
        entry = preds["nccl"].comm[kind]
        assert entry["ops_per_step"] == n_ops
        assert entry["bytes_per_step"] == pytest.approx(n_ops * per_op, rel=1e-12)
        dedup = preds["deepep"].comm[kind]["bytes_per_step"]
        assert 0.1 * entry["bytes_per_step"] < dedup < entry["bytes_per_step"]


def test_the_link_bytes_are_what_crosses_the_network_and_stay_under_the_nic() -> None:
    """Over RDMA the report counts the bytes that cross the network: NCCL's sends to the other nodes (3 of the 4
    nodes an EP32 group spans), DeepEP's one copy per remote node without its NVLink forwards, each at a rate
    the rank's NIC can carry (a 400 Gb/s ConnectX-7: 50 GB/s), which the bytes a rank sends need not be."""
    model, cluster = load_model("deepseek-v3-671b"), load_cluster("hgx-b200", n_gpus=256)
    nic_gbps = cluster.nic_bw_bytes_per_s * cluster.nics_per_gpu / 1e9
    for backend, share in (("nccl", 3 / 4), ("deepep", None)):
        plan = ParallelPlan(tp=2, pp=2, pp_schedule="interleaved-1f1b", vpp=2, ep=32, seq_len=8192, global_batch=4096,
                            dp_shard=64, ac="full", ep_backend=backend, routing="balanced")
        entry = predict(model, cluster, plan, stack="torchtitan").comm["moe.dispatch"]
        assert entry["link"] == "rdma"
        assert entry["link_bytes_per_step"] < entry["bytes_per_step"]
        if share is not None:  # the busiest rank's remote share of a balanced flat all-to-all
            assert entry["link_bytes_per_step"] == pytest.approx(share * entry["bytes_per_step"], rel=0.05)
        assert entry["link_gbps"] == pytest.approx(entry["link_bytes_per_step"] / entry["busy_s"] / 1e9)
        assert entry["link_gbps"] <= nic_gbps
    cost = comm.CommCost.of(1e-3, "rdma", 2e8, {"nic": 1e-3}, link_bytes=5e7)
    assert cost.crossing_bytes == 5e7 and cost.as_dict()["link_bytes"] == 5e7


@pytest.mark.parametrize("backend", comm.MOE_BACKENDS)
def test_each_backend_reports_the_terms_of_its_own_time(backend: str) -> None:
    cluster, model = load_cluster("hgx-b200", n_gpus=256), load_model("deepseek-v3-671b")
    for ranks, link in ((range(32), "rdma"), (range(8), "nvlink")):
        for phase in comm.PHASES:
            r = moe_alltoall(cluster, ranks, 4096, model, backend, phase, CommCosts.default(), bytes_per_elem=2.0)
            cost = r.cost
            assert cost is not None and cost.seconds == float(r.time_s.max())
            assert cost.link == link and cost.bytes == float(r.sent_bytes.max())
            assert cost.bound_by == max(cost.terms, key=lambda kv: kv[1])[0]
            # the dominant term is the time, or the larger of the max() the time is made of, plus small latencies
            assert max(v for _, v in cost.terms) <= cost.seconds * (1 + 1e-12)
            assert (r.counts_cost is not None) == (backend == "nccl" and phase == "dispatch")
            if r.counts_cost is not None:
                assert r.counts_cost.seconds == r.host_sync_s and r.counts_cost.bound_by == "latency"


def test_in_training_cost_is_in_training_time() -> None:
    cluster, model = load_cluster("h800-deepseek", n_gpus=2048), load_model("deepseek-v3-671b")
    costs = CommCosts.default()
    r = moe_alltoall(cluster, range(64), 4096, model, "deepep", "dispatch", costs,
                     bytes_per_elem=comm.FP8_WITH_SCALES_BYTES_PER_ELEM)
    for work_s, overlapped in ((0.0, False), (7.77e-3, True)):
        cost = comm.in_training_cost(r, costs, peers=64, work_s=work_s, overlapped=overlapped)
        assert cost is not None
        assert cost.seconds == comm.in_training_s(r, costs, peers=64, work_s=work_s, overlapped=overlapped)
    # on H800's 50 GB/s NICs the EP64 kernel stays NIC-bound even slowed under compute; the notify's barrier
    # wait (7.8 ms of compute between barriers) joins DeepEP's overhead in "latency"
    terms = dict(cost.terms)
    assert cost.bound_by == "nic" and terms["nic"] > terms["sms"] > terms["latency"] > 100 * costs.deepep_overhead_s


def test_ring_and_p2p_costs_are_their_times() -> None:
    costs = CommCosts.default()
    c16 = load_cluster("hgx-b200", n_gpus=16)
    for ranks, bound in ((range(16), "nic"), (range(8), "nvlink")):
        ag = comm.ring_cost(c16, ranks, 1e9, costs, "ag")
        ar = comm.ring_cost(c16, ranks, 1e9, costs, "ar")
        assert ag.seconds == comm.allgather_time(c16, ranks, 1e9, costs) and ag.bound_by == bound
        assert ar.seconds == comm.allreduce_time(c16, ranks, 1e9, costs) and ar.bound_by == bound
        assert ag.bytes == (len(ranks) - 1) * 1e9
    tiny = comm.ring_cost(c16, range(16), 1e3, costs)
    assert tiny.bound_by == "latency"
    p2p = comm.p2p_cost(c16, 0, 8, 1e3, costs)
    assert p2p.seconds == comm.p2p_time(c16, 0, 8, 1e3, costs) and p2p.bound_by == "latency"
    assert comm.p2p_cost(c16, 0, 1, 1e9, costs).link == "nvlink"


def test_bottleneck_is_the_largest_share_of_the_breakdown() -> None:
    """EP32 over 4 HGX nodes at 1,024 tokens: the all-to-all's exposed seconds against compute's (FSDP's NCCL
    channels included); the bottleneck is the larger, with its share of the step."""
    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=32)
    plan = ParallelPlan(ep=32, dp_shard=32, global_batch=64, seq_len=1024)
    no_boundary = dict(shipped_values(), **{"step.fixed_s": 0.0})  # this one-second step: the boundary aside
    p = predict(model, cluster, plan, params=no_boundary)
    compute = sum(v for k, v in p.breakdown.items() if k.startswith("compute.") or k == "optimizer")
    a2a = p.breakdown["comm.a2a"]
    assert p.bottleneck == (BOTTLENECKS["comm.a2a"] if a2a > compute else "compute")
    assert p.bottleneck_share == pytest.approx(max(a2a, compute) / p.step_time_s)
    shipped = predict(model, cluster, plan)  # the step boundary's fixed seconds, when the largest share, are named
    boundary = shipped.breakdown.get("step_fixed", 0.0)
    if boundary > max(a2a, compute):
        assert shipped.bottleneck == BOTTLENECKS["step_fixed"]


def test_trace_comm_slices_carry_what_bounds_them() -> None:
    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    p = predict(model, cluster, ParallelPlan(ep=16, dp_shard=16, global_batch=32, seq_len=1024))
    slices = [e for e in chrome_trace_events(p) if e.get("ph") == "X" and e["name"] == "moe.dispatch"]
    assert slices
    for e in slices:
        args = e["args"]
        assert args["bound_by"] == p.comm["moe.dispatch"]["bound_by"] and args["link"] == "rdma"
        assert args["bytes"] == pytest.approx(p.comm["moe.dispatch"]["bytes_per_step"]
                                              / p.comm["moe.dispatch"]["ops_per_step"])
        assert args["achieved_gbps"] == pytest.approx(args["bytes"] / (e["dur"] / 1e6) / 1e9, rel=1e-6)
        # 16 GPUs over two nodes: half of a flat dispatch stays in the node, off the network
        assert args["link_bytes"] == pytest.approx(p.comm["moe.dispatch"]["link_bytes_per_step"]
                                                   / p.comm["moe.dispatch"]["ops_per_step"])
        assert 0.4 * args["bytes"] < args["link_bytes"] < 0.6 * args["bytes"]
        assert args["link_gbps"] == pytest.approx(args["link_bytes"] / (e["dur"] / 1e6) / 1e9, rel=1e-6)
    compute = [e for e in chrome_trace_events(p) if e.get("ph") == "X" and e.get("cat") == "compute"]
    assert compute and not any("bound_by" in e["args"] for e in compute)


def test_text_output_has_one_bound_line_per_variant(capsys: pytest.CaptureFixture[str]) -> None:
    assert predict_main([]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "bound by: " in ln]
    assert len(lines) == 4
    assert all(re.search(r"moe\.(dispatch|combine) (nic|latency)-bound \(\d+ GB/step over rdma", ln) for ln in lines)
