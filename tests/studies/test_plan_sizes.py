"""Issue 28.6: ``moesim plan`` at any size. Counts are whole HGX nodes or NVL72 racks (racks and idle GPUs
printed), searched by doubling from a proven floor then bisection, every count tried reported (text and
JSON); ``--gpus-range``; the default memory headroom is the allocator's measured overhead; ``show --plan``
takes ``--stack`` and agrees with ``predict`` on memory."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math

import pytest

from moesim.cli import main
from sim.catalog import load_cluster, load_model
from sim.errors import ConfigError
from studies.plan import (
    ALLOCATOR_OVERHEAD,
    SMALL_SPACE,
    _roundest,
    _unit_counts,
    count_unit,
    flops_floor_gpus,
    global_batch_for,
    min_gpus,
    smallest_cluster,
)
from studies.search import PlanSpace, max_rate_per_gpu, search

MODEL = "deepseek-v3-16b"


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def hard() -> object:
    """A target between powers of two: 16B on 10T tokens in 30 days on B200."""
    return smallest_cluster(MODEL, tokens=1e13, days=30, gpus=["b200"], space=SMALL_SPACE)


def test_the_answer_is_node_granular_and_one_node_fewer_misses(hard: object) -> None:
    answer = hard
    best = answer.best  # type: ignore[attr-defined]
    tried = answer.tried["b200"]  # type: ignore[attr-defined]
    assert best is not None and best.n_gpus % 8 == 0 and best.days <= 30
    assert all(t.n_gpus % 8 == 0 for t in tried)
    assert best.n_gpus & (best.n_gpus - 1), "a node-granular count, not only powers of two"
    smaller = [t for t in tried if t.n_gpus < best.n_gpus]
    nearest = max(smaller, key=lambda t: t.n_gpus)
    assert nearest.n_gpus == best.n_gpus - 8 and nearest.outcome != "meets the target"
    assert any(t.n_gpus == best.n_gpus and t.outcome == "meets the target" for t in tried)
    need = 1e13 / (30 * 86400)
    assert best.best.prediction.tokens_per_s_per_gpu * best.n_gpus >= need
    assert answer.skipped["b200"] == [t.n_gpus for t in tried if t.outcome != "meets the target"]  # type: ignore[attr-defined]


def test_counts_below_the_proven_floor_are_not_searched(hard: object) -> None:
    answer = hard
    first = answer.tried["b200"][0].n_gpus  # type: ignore[attr-defined]
    space = dataclasses.replace(SMALL_SPACE, precision="mxfp8", ep_backend="deepep")
    model, need = load_model(MODEL), 1e13 / (30 * 86400)
    rate = max_rate_per_gpu(model, load_cluster("hgx-b200", gpu="b200"), space, "torchtitan")
    floor = max(min_gpus(model, "b200"), flops_floor_gpus(model, "b200", "mxfp8", space.seq_len, need),
                math.ceil(need / rate))
    assert first == math.ceil(floor / 8) * 8 and floor > 8
    assert answer.too_small["b200"].startswith(f"below {first}: counts are whole 8-GPU nodes")  # type: ignore[attr-defined]


def test_no_prediction_beats_the_rate_bound_the_floor_uses() -> None:
    model, cluster = load_model(MODEL), load_cluster("hgx-b200", n_gpus=64)
    space = PlanSpace(tp=(1, 2), pp=(1, 2), schedules=("1f1b", "dualpipev"), ep=(8, 16), ac=("none", "full"),
                      micro_batch=(1, 2), seq_len=2048, global_batch=256, precision="mxfp8", ep_backend="deepep")
    result = search(model, cluster, space, "torchtitan", keep=6)
    bound = max_rate_per_gpu(model, cluster, space, "torchtitan")
    assert result.best is not None
    for cand in [result.best, *result.runner_ups]:
        assert cand.prediction.tokens_per_s_per_gpu <= bound


def test_bisection_tries_the_roundest_count_and_ends_one_unit_apart() -> None:
    assert _roundest(256, 512) == 384 and _roundest(2048 // 8, 3072 // 8) == 320
    tried: list[int] = []
    assert _unit_counts(3, 100, lambda k: tried.append(k) or k >= 37) == 37
    assert tried[:4] == [3, 4, 8, 16] and 36 in tried
    assert _unit_counts(3, 10, lambda k: False) is None


def test_the_batch_policy_gives_every_node_count_a_whole_number_per_gpu() -> None:
    for n in (8, 24, 216, 1408, 2432, 3072, 4096, 9000):
        gb = global_batch_for(n)
        assert gb % n == 0 and gb >= max(4096, 2 * n) and gb < max(4096, 2 * n) + n
    assert global_batch_for(2048) == 4096 and global_batch_for(4096) == 8192  # powers of two as before


def test_nvl72_answers_count_racks_and_idle_gpus() -> None:
    assert count_unit("b200", "torchtitan") == (8, 0)
    assert count_unit("gb200", "torchtitan") == (72, 72) and count_unit("gb200", "megatron") == (64, 72)
    mega = smallest_cluster(MODEL, tokens=1e13, days=30, gpus=["gb200"], space=SMALL_SPACE, stack="megatron")
    assert mega.best is not None and mega.best.n_gpus % 64 == 0
    assert mega.best.racks == mega.best.n_gpus // 64 and mega.best.idle_gpus == 8 * mega.best.racks
    titan = smallest_cluster(MODEL, tokens=3e12, days=30, gpus=["gb200"], space=SMALL_SPACE)
    assert titan.best is not None and titan.best.n_gpus == 72 * titan.best.racks and titan.best.idle_gpus == 0


def test_plan_text_and_json_say_which_counts_were_tried() -> None:
    code, out, err = _cli("plan", "--model", MODEL, "--tokens", "1e13", "--days", "30", "--gpu", "gb200", "--stack",
                          "megatron", "--no-progress", "--workers", "1")
    assert code == 0, err
    assert "NVL72 racks, 16 GPUs idle)" in out or "NVL72 rack" in out
    assert "counts tried (gb200, whole NVL72 racks (64 of 72 GPUs used); doubling, then bisection):" in out
    code, out, err = _cli("plan", "--model", MODEL, "--tokens", "3e12", "--days", "30", "--gpu", "b200", "--json",
                          "--workers", "1", "--gpus-range", "64:256")
    assert code == 0, err
    doc = json.loads(out)
    tried = doc["counts_tried"]["b200"]
    assert tried and all(64 <= t["n_gpus"] <= 256 and t["n_gpus"] % 8 == 0 for t in tried)
    assert doc["best"]["n_gpus"] in [t["n_gpus"] for t in tried if t["outcome"] == "meets the target"]
    assert doc["count_unit"] == {"b200": 8} and any("allocator overhead" in a for a in doc["assumptions"])


@pytest.mark.parametrize("bad", ["5:1", "0:8", "8", "a:b", "1:70000"])
def test_a_bad_gpus_range_exits_2_in_one_line(bad: str) -> None:
    with pytest.raises(SystemExit) as exc, contextlib.redirect_stderr(io.StringIO()) as err:
        main(["plan", "--model", MODEL, "--tokens", "1e11", "--days", "30", "--gpus-range", bad])
    assert exc.value.code == 2 and "--gpus-range" in err.getvalue()


def test_a_range_no_count_of_which_meets_the_target_answers_none() -> None:
    answer = smallest_cluster(MODEL, tokens=1e13, days=30, gpus=["b200"], space=SMALL_SPACE, gpus_range=(8, 64))
    assert answer.best is None and answer.tried["b200"] == []  # 64 GPUs lie below the proven floor: none searched
    assert "miss the target even at their compute alone" in answer.too_small["b200"]
    # above the proven floor but below the smallest count that meets the target in this space
    smallest = smallest_cluster(MODEL, tokens=1e13, days=30, gpus=["b200"], space=SMALL_SPACE).best
    assert smallest is not None
    top = smallest.n_gpus - 8
    answer = smallest_cluster(MODEL, tokens=1e13, days=30, gpus=["b200"], space=SMALL_SPACE, gpus_range=(8, top))
    assert answer.best is None and answer.tried["b200"] and all(t.n_gpus <= top for t in answer.tried["b200"])
    assert all(t.outcome == "too slow" for t in answer.tried["b200"])
    code, out, _err = _cli("plan", "--model", MODEL, "--tokens", "1e13", "--days", "30", "--gpu", "b200",
                           "--gpus-range", "8:64", "--no-progress", "--workers", "1")
    assert code == 1 and "no cluster of 8 to 64 GPUs" in out
    with pytest.raises(ConfigError, match="--gpus-range"):
        smallest_cluster(MODEL, tokens=1e13, days=30, gpus=["b200"], gpus_range=(64, 8))


def test_the_default_headroom_is_the_allocators_measured_overhead(hard: object) -> None:
    assert ALLOCATOR_OVERHEAD == pytest.approx(60.18 / 55.4 - 1) and 0.08 < ALLOCATOR_OVERHEAD < 0.09
    p = hard.best.best.prediction  # type: ignore[attr-defined]
    assert p.peak_memory_bytes * (1 + ALLOCATOR_OVERHEAD) <= p.memory_capacity_bytes


def test_show_plan_takes_the_stack_and_agrees_with_predict_on_memory() -> None:
    plan = "examples/plan-dsv3-671b-b200.toml"
    for stack in ("torchtitan", "megatron"):
        code, out, err = _cli("show", "deepseek-v3-671b", "--plan", plan, "--stack", stack, "--json")
        assert code == 0, err
        shown = json.loads(out)["memory"]["total_bytes"]
        code, out, err = _cli("predict", "--model", "deepseek-v3-671b", "--gpus", "256", "--tp", "2", "--pp", "2",
                              "--pp-schedule", "interleaved-1f1b", "--vpp", "2", "--ep", "32", "--seq-len", "8192",
                              "--global-batch", "4096", "--ac", "full", "--precision", "bf16", "--ep-backend", "nccl",
                              "--stack", stack, "--json")
        assert code == 0, err
        assert json.loads(out)["predictions"][0]["peak_memory_bytes"] == pytest.approx(shown, rel=1e-12), stack
    titan = json.loads(_cli("show", "deepseek-v3-671b", "--plan", plan, "--json")[1])["memory"]["total_bytes"]
    mega = json.loads(_cli("show", "deepseek-v3-671b", "--plan", plan, "--stack", "megatron", "--json")[1])
    assert mega["memory"]["total_bytes"] != titan  # ZeRO-1 and TE's FP8 caches are not FSDP2's


def test_a_target_prunes_exactly_and_a_probe_finds_a_plan_that_meets_it() -> None:
    model, cluster = load_model(MODEL), load_cluster("hgx-b200", n_gpus=64)
    space = PlanSpace(tp=(1, 2), pp=(1, 2), schedules=("1f1b", "interleaved-1f1b", "dualpipev"), vpp=(2,),
                      ep=(8, 16), ac=("none", "full"), micro_batch=(1, 2), seq_len=2048, global_batch=256,
                      precision="mxfp8", ep_backend="deepep", headroom_fraction=ALLOCATOR_OVERHEAD)
    full = search(model, cluster, space, "torchtitan", keep=1000, prune=False)
    steps = sorted(c.prediction.step_time_s for c in [full.best, *full.runner_ups])  # type: ignore[list-item]
    target = steps[len(steps) // 3]
    capped = search(model, cluster, space, "torchtitan", keep=4, max_step_s=target)
    assert capped.best is not None and capped.best.prediction.step_time_s == steps[0]
    assert [c.prediction.step_time_s for c in capped.runner_ups] == steps[1:4]
    assert capped.counts["bound_violations"] == 0
    probe = search(model, cluster, space, "torchtitan", max_step_s=target, first_fit=True)
    assert probe.best is not None and probe.best.prediction.step_time_s <= target
    assert probe.counts["evaluated"] <= capped.counts["evaluated"]
    miss = search(model, cluster, space, "torchtitan", max_step_s=steps[0] * 0.999, first_fit=True)
    # every plan misses it: cut by its cheap bound (over_target) or by its tightened one (pruned), or predicted
    assert miss.best is None and miss.counts["over_target"] + miss.counts["pruned"] > 0
    assert miss.counts["evaluated"] < miss.counts["valid"]


def test_the_assumptions_say_when_the_stacks_deepep_path_duplicates_tokens_over_tp() -> None:
    """TorchTitan (1a36996b) dispatches every token on every TP rank under DeepEP; Megatron splits them; with the
    standard all-to-all there is nothing to say."""
    import argparse

    from moesim.plan_cmd import assumptions

    def lines(stack: str, backend: str) -> list[str]:
        return assumptions(argparse.Namespace(stack=stack, precision=None, ep_backend=backend, global_batch=None,
                                              headroom_pct=None, headroom_gib=0.0))

    assert any("every TP rank dispatches" in a for a in lines("torchtitan", "deepep"))
    assert not any("every TP rank dispatches" in a for a in lines("megatron", "deepep"))
    assert not any("every TP rank dispatches" in a for a in lines("torchtitan", "nccl"))
    assert not any("every TP rank dispatches" in a for a in lines("/no/such/stack.toml", "deepep"))
    assert any("document boundaries" in a for a in lines("torchtitan", "nccl"))
    assert not any("document boundaries" in a for a in lines("megatron", "nccl"))
    # the step boundary's fixed seconds: for the releases the joint fit covers, not for DeepSeek's trace stack
    assert any("step boundary" in a for a in lines("megatron", "nccl"))
    assert not any("step boundary" in a for a in lines("deepseek", "deepep"))
