"""End-to-end: the seed scenario, the CLI contract, bad plans, traces, calibration files."""

import json
import subprocess
import sys

import pytest

from moesim.predict_cmd import main
from sim.catalog import load_cluster, load_gpu, load_model
from sim.costs import CostModel, default_costs
from sim.errors import ConfigError, PlanError
from sim.ops import ALL_OPS
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.trace import chrome_trace_events


@pytest.fixture(scope="module")
def seed_preds():
    import argparse

    from moesim.predict_cmd import _run, add_predict_arguments

    parser = argparse.ArgumentParser()
    add_predict_arguments(parser)
    preds, _ = _run(parser.parse_args([]))
    return preds


def test_seed_scenario_orders_and_fits(seed_preds):
    """TorchTitan's literal round-robin forced balance (one DeepEP copy per token at EP32), DeepEP's
    in-place data path, DeepEP's in-training costs as mechanisms (barrier waits from arrival spread; no
    overlap slowdown: TorchTitan runs the all-to-all in line)."""
    base, deepep, mx, mx_nccl = seed_preds
    assert base.tokens_per_s_per_gpu < mx_nccl.tokens_per_s_per_gpu < deepep.tokens_per_s_per_gpu
    assert mx.tokens_per_s_per_gpu > deepep.tokens_per_s_per_gpu  # MXFP8 helps on top of DeepEP
    assert all(p.fits_in_memory for p in seed_preds)


# Issue 27 Must show 4: the seed's three runs within 5% and both speedups within 3 points, in the joint fit (no row
# fitted alone). The BF16 row held (-1.1%) while forced balance took the real router's EP-barrier spread; with that
# mechanism off (it lowers no run's leave-one-group-out error) the TorchTitan release scalar followed the DeepEP
# rows down (-7.5%). With TorchTitan's DeepEP path dispatching every token on every TP rank, NCCL's all-to-all at its
# fitted share of the network, TorchTitan's document mask on C4 and the step boundary's fixed seconds
# (step.fixed_s) the rows were -3.8% / -3.8% / +2.1%. While TorchTitan kept a step boundary of its own (0 s, from
# its one-node steps of about a second, which are single-microbatch steps the boundary no longer charges) the one
# TorchTitan scalar sat between the B200 runs (too slow, -6.3% / -7.3%) and the H100 pair (too fast); with its
# accumulating steps paying the joint step.fixed_s (2026-12-06) the rows are within 5%.
@pytest.mark.parametrize(("row", "measured"), [(0, 651), (1, 859), (2, 918)])
def test_seed_row_within_five_percent(seed_preds, row, measured):
    assert seed_preds[row].tokens_per_s_per_gpu == pytest.approx(measured, rel=0.05)


# The DeepEP speedup within 3 points (Must show 4). It held within 5 while DeepEP's internode kernels were scaled by
# constants read off DeepSeek's DualPipe trace (x1.98 / x1.46 and a 2,036 us notify on every kernel of every plan);
# with those constants replaced by mechanisms (issue 14) the speedups came out +54% / +67% against +32% / +41%; with
# TorchTitan's DeepEP path dispatching every token on every TP rank (deepep_tp_token_split, issue 27) it is +31.9%.
def test_seed_deepep_speedup_within_three_points(seed_preds):
    base, deepep, _, _ = seed_preds
    assert abs(deepep.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu - 1.32) < 0.03


@pytest.fixture(scope="module")
def h100_pair():
    """TorchTitan's NCCL / DeepEP pair on 512 H100 (PR #2107): (measured, predicted) tok/s/GPU of each, shipped fit."""
    from sim.measured_runs import resolve_run
    from sim.stacks import profile_for
    from studies.dataset import load_runs

    out = {}
    for run in load_runs():
        if run.id in ("titan-dsv3-h100-bf16", "titan-dsv3-h100-bf16-deepep"):
            model, cluster, plan = resolve_run(run)
            pred = predict(model, cluster, plan, stack=profile_for(run.stack, run.release))
            out[run.plan["ep_backend"]] = (run.measured_tokens_per_s_per_gpu, pred.tokens_per_s_per_gpu)
    return out


# Must show 4: TorchTitan's 512-H100 pair within 10% each and its DeepEP speedup within 10%. The NCCL row sat just
# inside (+9.8%, +11.3% with the one shared grouped half-point before it) until TorchTitan's accumulating steps paid the
# joint step boundary (+5.2% then, 2026-12-06).
@pytest.mark.parametrize("backend", ["nccl", "deepep"])
def test_torchtitan_h100_row_within_ten_percent(h100_pair, backend):
    measured, predicted = h100_pair[backend]
    assert predicted == pytest.approx(measured, rel=0.10)


def test_torchtitan_h100_deepep_speedup_within_ten_percent(h100_pair):
    (m_nccl, p_nccl), (m_deepep, p_deepep) = h100_pair["nccl"], h100_pair["deepep"]
    assert p_deepep / p_nccl == pytest.approx(m_deepep / m_nccl, rel=0.10)


# Issue 7 item 3: with literal round-robin routing the MXFP8+DeepEP speedup was within 5 points of +41%.
def test_seed_mxfp8_speedup_within_three_points(seed_preds):
    """Issue 27 Must-show 4 (+41% measured): met once TorchTitan's index sums and its combine's bmm backward take
    their measured kernel rates (StackProfile.indexed_accumulate, combine_bmm_batched)."""
    base, _, mx, _ = seed_preds
    assert abs(mx.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu - 1.41) < 0.03


def test_breakdown_sums_to_step(seed_preds):
    for p in seed_preds:
        assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=1e-9)
        assert p.stack == "torchtitan" and "stack" in p.to_dict() and "hidden_comm" in p.to_dict()


def test_ep_overlap_hides_most_of_the_all_to_all():
    """Must show 3: --ep-overlap (Megatron combined 1F1B) on a B200 EP32 DeepEP interleaved plan exposes at
    most 40% of the all-to-all seconds it exposes without. The seed's plan and TorchTitan's kernel rates,
    with the combined-1F1B overlap switched on (TorchTitan itself has no such schedule)."""
    import dataclasses

    from sim.stacks import load_stack

    model, cluster = load_model("deepseek-v3-671b"), load_cluster("hgx-b200", n_gpus=256)
    plan = ParallelPlan(tp=2, pp=2, pp_schedule="interleaved-1f1b", vpp=2, ep=32, dp_shard=64, seq_len=8192,
                        global_batch=4096, ac="selective", ep_backend="deepep")
    stack = dataclasses.replace(load_stack("torchtitan"), name="torchtitan+ep-overlap", ep_overlap_available=True)
    off = predict(model, cluster, plan, stack=stack)
    on = predict(model, cluster, dataclasses.replace(plan, ep_overlap=True), stack=stack)
    assert on.breakdown["comm.a2a"] <= 0.40 * off.breakdown["comm.a2a"]
    assert on.step_time_s < off.step_time_s
    assert on.hidden_comm["comm.a2a"] > off.hidden_comm.get("comm.a2a", 0.0)
    with pytest.raises(PlanError, match="torchtitan"):
        predict(model, cluster, dataclasses.replace(plan, ep_overlap=True))
    with pytest.raises(ConfigError, match="ep_overlap"):
        dataclasses.replace(plan, ep=1, dp_shard=64, ep_overlap=True)
    with pytest.raises(PlanError, match="interleaved"):
        predict(model, cluster, dataclasses.replace(plan, pp_schedule="1f1b", vpp=1, ep_overlap=True), stack=stack)


def test_json_contract(capsys):
    assert main(["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["predictions"]) == 4
    for item in data["predictions"]:
        for key in ("name", "tokens_per_s_per_gpu", "step_time_s", "tflops_per_gpu", "mfu", "peak_memory_bytes",
                    "fits_in_memory", "breakdown"):
            assert key in item


def test_single_plan_derives_data_parallel(capsys):
    assert main(["--model", "deepseek-v3-16b", "--gpu", "b200", "--gpus", "16", "--ep", "8", "--json"]) == 0
    item = json.loads(capsys.readouterr().out)["predictions"][0]
    assert item["plan"]["dp_shard"] == 16 and item["plan"]["ep"] == 8


@pytest.mark.parametrize("argv,needle", [
    (["--model", "deepseek-v3-671b", "--gpus", "256", "--tp", "2", "--ep", "48"], "ep"),
    (["--model", "deepseek-v3-16b", "--gpus", "16", "--pp", "4", "--global-batch", "8"], "microbatches"),
    (["--model", "deepseek-v3-16b", "--gpus", "16", "--gpu", "h100", "--precision", "mxfp8"], "SM100"),
    (["--scenario", "no-such-scenario"], "unknown scenario"),
    (["--model", "nope", "--gpus", "8"], "unknown model"),
])
def test_bad_plans_exit_2_with_one_message(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and err.count("\n") == 1


def test_deepep_needs_capable_gpu():
    import dataclasses

    cluster = load_cluster("hgx-b200", n_gpus=8)
    cluster = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu, deepep=False))
    with pytest.raises(PlanError, match="DeepEP"):
        predict(load_model("debug"), cluster, ParallelPlan(ep=4, dp_shard=8, ep_backend="deepep", global_batch=8))


def test_user_scenario_file(tmp_path, capsys):
    f = tmp_path / "mine.toml"
    f.write_text('[scenario]\nmodel = "debug"\ncluster = "hgx-h100"\ngpus = 8\n[base]\nep = 4\nglobal_batch = 16\n'
                 '[[variant]]\nname = "a"\n[[variant]]\nname = "b"\nplan = { ep_backend = "deepep" }\n')
    assert main(["--scenario", str(f), "--json"]) == 0
    names = [p["name"] for p in json.loads(capsys.readouterr().out)["predictions"]]
    assert names == ["a", "b"]
    f.write_text('[scenario]\nmodel = "debug"\ngpus = 8\nbogus = 1\n')
    assert main(["--scenario", str(f)]) == 2


def test_trace_uses_shared_vocabulary(tmp_path):
    p = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=16),
                ParallelPlan(pp=2, ep=4, dp_shard=8, global_batch=32, seq_len=256))
    events = chrome_trace_events(p)
    op_names = {e["name"] for e in events if e.get("cat") in ("compute", "comm")}
    assert op_names and op_names <= set(ALL_OPS)
    assert main(["--model", "debug", "--gpus", "8", "--ep", "4", "--trace", str(tmp_path / "t.json")]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


def test_calibration_roundtrip_and_version(tmp_path):
    costs = default_costs(load_gpu("b200"))
    assert CostModel.from_json(costs.to_json()) == costs
    bad = json.loads(costs.to_json())
    bad["version"] = 99
    with pytest.raises(ConfigError, match="version"):
        CostModel.from_dict(bad)
    f = tmp_path / "calibration.json"
    f.write_text(costs.to_json())
    assert main(["--model", "debug", "--gpus", "8", "--ep", "4", "--calibration", str(f)]) == 0


def test_import_sim_predict_keeps_torch_out():
    code = "import sys, sim, sim.predict, moesim.predict_cmd, sim.trace; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_skewed_routing_is_slower_and_deterministic():
    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    plans = [ParallelPlan(ep=8, dp_shard=16, global_batch=64, micro_batch=4, seq_len=8192, routing=r, routing_seed=3)
             for r in ("balanced", "zipf:1.0")]
    bal, skew = (predict(model, cluster, p) for p in plans)
    assert skew.step_time_s > bal.step_time_s
    assert predict(model, cluster, plans[1]).step_time_s == skew.step_time_s


def test_trace_shows_overlapped_pairs_on_compute_and_comm_threads():
    """A DualPipeV plan: pair slices carry op detail on threads named compute and comm, overlapping in time."""
    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    plan = ParallelPlan(pp=2, pp_schedule="dualpipev", ep=8, dp_shard=8, seq_len=4096, global_batch=32,
                        ep_backend="deepep", ac="none")
    events = chrome_trace_events(predict(model, cluster, plan), detail_microbatches=8)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    pair_ops = [e for e in events if e.get("ph") == "X" and "pair" in e.get("args", {})]
    assert {"compute stream", "comm stream"} <= {names[(e["pid"], e["tid"])] for e in pair_ops}
    comm = [e for e in pair_ops if e["name"] == "moe.dispatch"]
    comp = [e for e in pair_ops if names[(e["pid"], e["tid"])] == "compute stream"]
    assert any(c["ts"] < d["ts"] + d["dur"] and d["ts"] < c["ts"] + c["dur"] for d in comm for c in comp)


def test_ep_overlap_flag_errors_exit_2(capsys):
    assert main(["--model", "deepseek-v3-16b", "--gpu", "b200", "--gpus", "8", "--ep-overlap"]) == 2
    assert "ep_overlap" in capsys.readouterr().err
    assert main(["--model", "deepseek-v3-16b", "--gpu", "b200", "--gpus", "8", "--ep", "8", "--ep-overlap"]) == 2
    assert "torchtitan" in capsys.readouterr().err


def test_slowest_ep_group_decides_not_rank_zeros():
    """12-GPU NVLink domains, EP8: rank 0's group sits inside a domain, ranks 8-15 straddle two; the all-to-all
    time is the straddling group's (its flows cross the NICs), several times rank 0's."""
    import dataclasses

    from sim import comm
    from sim.predict.timing import Context
    from sim.stacks import StackProfile

    cluster = dataclasses.replace(load_cluster("hgx-b200", n_gpus=24), gpus_per_node=4, nvlink_domain_gpus=12)
    model = load_model("deepseek-v3-16b")
    plan = ParallelPlan(ep=8, dp_shard=24, global_batch=24, seq_len=4096)
    ctx = Context(model, cluster, plan, default_costs(cluster.gpu), StackProfile())
    assert len(ctx._ep_groups) == 2
    rank0 = comm.moe_alltoall(cluster, ctx.layout.ep_group(0), int(ctx.wl.tokens_dispatched), model, "nccl",
                              "dispatch", ctx.ccosts, bytes_per_elem=2.0)
    straddle = comm.moe_alltoall(cluster, ctx.layout.ep_group(8), int(ctx.wl.tokens_dispatched), model, "nccl",
                                 "dispatch", ctx.ccosts, bytes_per_elem=2.0)
    assert float(ctx.a2a("a2a.dispatch").time_s.max()) == float(straddle.time_s.max()) > 3 * float(rank0.time_s.max())


def test_shared_expert_overlap_hides_dispatch_behind_shared_expert():
    """Megatron's moe_shared_expert_overlap: the shared expert runs under the dispatch, so the layer is shorter
    and the dispatch's hidden seconds grow."""
    from sim.predict.layers import simulate_layer
    from sim.predict.timing import Context
    from sim.stacks import StackProfile

    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    plan = ParallelPlan(ep=16, dp_shard=16, global_batch=16, seq_len=4096, ac="none")
    res = {}
    for overlap in (False, True):
        ctx = Context(model, cluster, plan, default_costs(cluster.gpu), StackProfile(shared_expert_overlap=overlap))
        res[overlap] = simulate_layer(ctx, "moe", "fwd")
    assert res[True].time_s < res[False].time_s
    assert res[True].hidden_s.get("comm.a2a", 0.0) > res[False].hidden_s.get("comm.a2a", 0.0)
    assert sum(res[True].parts.values()) == pytest.approx(res[True].time_s)

def test_shared_expert_beside_combine_hides_combine_in_forward_and_recompute_only():
    """TorchTitan's standard path (StackProfile.shared_expert_beside_combine): the combine all-to-all is waited on
    where its output is first used, after the shared experts, so they run beside it in the forward and its
    recompute; the backward (an all-to-all that waits at once) and the DeepEP path (combine_tokens waits before
    returning) are unchanged. The saving is at most the shared experts' own seconds."""
    from sim.predict.layers import simulate_layer
    from sim.predict.timing import Context
    from sim.stacks import StackProfile, load_stack

    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    res = {}
    for backend in ("nccl", "deepep"):
        plan = ParallelPlan(ep=16, dp_shard=16, global_batch=16, seq_len=4096, ac="full", ep_backend=backend)
        for beside in (False, True):
            ctx = Context(model, cluster, plan, default_costs(cluster.gpu),
                          StackProfile(shared_expert_beside_combine=beside))
            res[backend, beside] = {ph: simulate_layer(ctx, "moe", ph) for ph in ("fwd", "bwd")}
    off, on = res["nccl", False], res["nccl", True]
    shared_fwd = off["fwd"].parts["compute.moe.shared_expert"]
    assert off["fwd"].time_s - shared_fwd - 1e-9 <= on["fwd"].time_s < off["fwd"].time_s
    assert on["fwd"].hidden_s.get("comm.a2a", 0.0) > off["fwd"].hidden_s.get("comm.a2a", 0.0)
    # the bwd phase holds the recompute (beside) and the backward (not): it gains at most one forward's worth
    assert off["bwd"].time_s - shared_fwd - 1e-9 <= on["bwd"].time_s < off["bwd"].time_s
    for ph in ("fwd", "bwd"):
        assert sum(on[ph].parts.values()) == pytest.approx(on[ph].time_s)
        assert res["deepep", True][ph].time_s == pytest.approx(res["deepep", False][ph].time_s)
    assert load_stack("torchtitan").shared_expert_beside_combine
    assert not load_stack("megatron-26.04").shared_expert_beside_combine



def test_zero1_replaces_per_layer_gathers_with_one_bucketed_reduction():
    """Megatron's distributed optimizer (stack.param_sharding = zero1): no FSDP streams in the layers, only the
    last gradient bucket's reduce-scatter exposed; FSDP2 (torchtitan) gathers every layer."""
    from sim.stacks import StackProfile

    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    plan = ParallelPlan(ep=8, dp_shard=16, global_batch=32, seq_len=4096)
    fsdp = predict(model, cluster, plan)
    zero1 = predict(model, cluster, plan, stack=StackProfile(param_sharding="zero1"))
    streams = {r[1] for r in fsdp.trace_data["layers"][("moe", "bwd")].log}
    assert {"fsdp_ag", "fsdp_rs"} <= streams
    assert not {"fsdp_ag", "fsdp_rs"} & {r[1] for r in zero1.trace_data["layers"][("moe", "bwd")].log}
    assert zero1.breakdown.get("comm.fsdp", 0.0) < fsdp.breakdown.get("comm.fsdp", 0.0) + fsdp.hidden_comm.get(
        "comm.fsdp", 0.0)


def test_fsdp_prefetch_and_all_to_all_share_the_nic():
    """Single-stage FSDP over 4 nodes, NCCL EP16: the layer's FSDP gathers and its all-to-alls cross the same
    NIC; with the NIC coupling the all-to-all runs slower than alone (an unbounded NIC removes the coupling)."""
    from sim.predict.layers import simulate_layer
    from sim.predict.timing import Context
    from sim.stacks import StackProfile

    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=32)
    plan = ParallelPlan(ep=16, dp_shard=32, global_batch=32, seq_len=4096, ac="none")
    shared = Context(model, cluster, plan, default_costs(cluster.gpu), StackProfile())
    apart = Context(model, cluster, plan, default_costs(cluster.gpu), StackProfile())
    apart.nic_bw = 1e30
    a = simulate_layer(shared, "moe", "fwd")
    b = simulate_layer(apart, "moe", "fwd")
    dispatch = lambda r: next(e - s for n, st, _ph, s, e in r.log if n == "moe.dispatch")  # noqa: E731
    assert dispatch(a) > dispatch(b) * 1.01
    assert a.time_s > b.time_s
