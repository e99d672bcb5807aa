"""F&B pair simulation: DeepSeek's issue order, and run compression that is exact in the steady state."""

from __future__ import annotations

import pytest

from sim.catalog import load_cluster, load_model
from sim.costs import default_costs
from sim.predict import predict
from sim.predict.layers import _compress, _pair_order, _run_pair, simulate_pair
from sim.predict.timing import Context
from sim.specs import ParallelPlan
from sim.stacks import load_stack


def test_pair_order_is_deepseeks_for_five_segments_a_side() -> None:
    # segments: 0 attn | 1 dispatch | 2 mlp | 3 combine | 4 post (forward); backward the mirror
    assert _pair_order(5, 5) == [
        ("B", 0, "main"), ("B", 1, "main"), ("B", 0, "w"), ("F", 0, "main"),
        ("F", 1, "main"), ("B", 2, "main"), ("B", 3, "main"), ("B", 2, "w"), ("F", 2, "main"),
        ("F", 3, "main"), ("B", 4, "main"), ("B", 4, "w"), ("F", 4, "main"),
    ]


def test_pair_order_with_one_side_shorter_issues_every_segment_once() -> None:
    for n_b, n_f in ((5, 1), (1, 5), (3, 5), (0, 3), (3, 0)):
        order = _pair_order(n_b, n_f)
        assert sorted(s for side, s, part in order if side == "F") == list(range(n_f))
        assert sorted(s for side, s, part in order if side == "B" and part == "main") == list(range(n_b))
        assert sorted(s for side, s, part in order if part == "w") == list(range(0, n_b, 2))


def test_compress_shortens_only_the_longest_run_and_only_where_it_saves() -> None:
    f = ["embed"] + ["moe"] * 10
    b = ["moe"] * 10 + ["head"]
    # pairs: (embed, moe), (moe, moe) x 9, (moe, head)
    assert _compress(f, b, 3) == (["embed", "moe", "moe", "moe", "moe"], ["moe", "moe", "moe", "moe", "head"], 6)
    assert _compress(f, b, 3, min_saving=1)[2] == 6  # 11 pairs whole vs 5 + 4: saves 2
    f5, b5 = ["moe"] * 5, ["moe"] * 5
    assert _compress(f5, b5, 3)[2] == 2
    assert _compress(f5, b5, 3, min_saving=1) == (f5, b5, 0)  # 3 + 2 = 5 pairs: no saving
    assert _compress(["moe"] * 6, ["moe"] * 6, 3, min_saving=1)[2] == 3  # 3 + 2 < 6
    assert _compress(["moe"] * 3, ["moe"] * 3, 3) == (["moe"] * 3, ["moe"] * 3, 0)
    mixed = ["dense", "moe", "dense", "moe"]
    assert _compress(mixed, mixed, 1) == (mixed, mixed, 0)


@pytest.mark.parametrize("routing", ["balanced", "zipf:1.2"])
def test_compressed_pair_equals_the_whole_simulation(routing: str) -> None:
    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    plan = ParallelPlan(pp=2, pp_schedule="dualpipev", ep=8, dp_shard=8, seq_len=2048, global_batch=32,
                        ep_backend="deepep", ac="none", routing=routing, routing_seed=1)
    ctx = Context(model, cluster, plan, default_costs(cluster.gpu), load_stack("torchtitan"))
    f = ["dense"] + ["moe"] * 9
    b = ["moe"] * 9 + ["head"]
    whole, fast = _run_pair(ctx, f, b), simulate_pair(ctx, f, b)
    assert fast.time_s == pytest.approx(whole.time_s, rel=1e-9)
    assert fast.comm_s == pytest.approx(whole.comm_s, rel=1e-9)
    for got, want in ((fast.compute_s, whole.compute_s), (fast.exposed_s, whole.exposed_s),
                      (fast.hidden_s, whole.hidden_s)):
        assert set(got) <= set(want) | {k for k, v in got.items() if v == 0}
        for k, v in want.items():
            assert got.get(k, 0.0) == pytest.approx(v, rel=1e-9, abs=1e-12), k
    assert sum(fast.compute_s.values()) + sum(fast.exposed_s.values()) == pytest.approx(fast.time_s, rel=1e-12)
    # a dense-only pair holds one symmetry class; a MoE pair one per class
    assert {r.rank for r, _ in _run_pair(ctx, ["dense"], ["dense"]).records} == {0}


def test_unused_pairs_are_not_simulated() -> None:
    """DualPipeV pairs a rank's forward of one leg with the backward of its other leg only."""
    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    plan = ParallelPlan(pp=4, pp_schedule="dualpipev", ep=4, dp_shard=4, seq_len=2048, global_batch=32,
                        ep_backend="deepep", ac="none")
    pred = predict(model, cluster, plan)
    pairs, pipe = pred.trace_data["pairs"], pred.trace_data["pipeline"]
    assert set(pairs) == set(pipe.pair_stages.values())
    assert set(pairs) == {(s, 7 - s) for s in range(8)}


def test_shared_expert_moves_under_the_dispatch_with_the_count_exchange_and_host_stall() -> None:
    """Megatron's moe_shared_expert_overlap on the NCCL path: the shared expert is issued right after the
    dispatch, reads what the op before the count exchange and host stall read, and the combine's consumer
    waits for it; the layer's segments split at the a2a groups (counts + stall + dispatch, then combine)."""
    from sim.predict.layers import _segments, layer_nodes
    from sim.stacks import StackProfile

    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    plan = ParallelPlan(ep=16, dp_shard=16, global_batch=16, seq_len=4096, ac="none", ep_backend="nccl")
    ctx = Context(model, cluster, plan, default_costs(cluster.gpu), StackProfile(shared_expert_overlap=True))
    nodes = layer_nodes(ctx, "moe", "fwd")
    names = [n.op.name for n in nodes]
    d = names.index("moe.dispatch")
    assert names[d - 2:d] == ["a2a.count_exchange", "a2a.host_sync"]
    shared = [i for i, n in enumerate(names) if n == "moe.shared_expert"]
    assert shared == list(range(d + 1, d + 1 + len(shared)))  # right after the dispatch
    assert nodes[shared[0]].deps == (d - 3,)  # the permute before the counts: the dispatch's own input
    assert all(nodes[i].deps == (i - 1,) for i in shared[1:])
    assert nodes[shared[-1] + 1].deps == (d,)  # the main chain goes on from the dispatch
    last = len(nodes) - 1
    assert nodes[last].deps == (last - 1, shared[-1])  # the combine's consumer also waits for the shared expert
    c = names.index("moe.combine")
    assert _segments(nodes) == [list(range(d - 2)), [d - 2, d - 1, d], list(range(d + 1, c)), [c], [last]]


def test_tp_collectives_and_all_to_alls_run_on_their_own_streams() -> None:
    """One stream per process group: in a TP2 DualPipeV pair a TP gather of one microbatch runs while the other
    microbatch's dispatch is still in flight (on one shared stream it would queue behind it)."""
    from sim.predict.layers import _stream_of
    from sim.workload import OpSpec

    assert _stream_of(OpSpec("tp.all_gather", "comm", coll="tp.all_gather")) == "tp"
    assert _stream_of(OpSpec("moe.dispatch", "comm", coll="a2a.dispatch")) == "comm"
    assert _stream_of(OpSpec("moe.expert_gemm", "grouped_gemm")) == "compute"
    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=32)
    plan = ParallelPlan(tp=2, pp=2, pp_schedule="dualpipev", ep=8, dp_shard=8, seq_len=4096, global_batch=32,
                        ep_backend="deepep", ac="full")
    ctx = Context(model, cluster, plan, default_costs(cluster.gpu), load_stack("torchtitan"))
    log = _run_pair(ctx, ["moe", "moe"], ["moe", "moe"]).log
    tp = [(s, e) for name, stream, _ph, s, e in log if stream == "tp"]
    a2a = [(s, e) for name, stream, _ph, s, e in log if stream == "comm" and name == "moe.dispatch"]
    assert tp and a2a
    assert any(ts < de and ds < te for ts, te in tp for ds, de in a2a)
