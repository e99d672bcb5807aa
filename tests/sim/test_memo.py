"""Shared layer simulations (sim.predict.memo): a prediction is the same bit for bit with a memo that earlier
predictions of other plans filled, and a memo never answers for another scope."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.catalog import load_cluster, load_model
from sim.costs import default_costs
from sim.errors import MoesimError
from sim.predict import Prediction, SimMemo, predict
from sim.predict.memo import PIPELINE_FIELDS, layer_sim_key
from sim.specs import ParallelPlan
from sim.stacks import load_stack

MODEL = load_model("deepseek-v3-16b")
#: an NVL72 rack (EP groups straddle racks differently as PP and DP move them) and an HGX cluster
CLUSTERS = {"hgx": load_cluster("hgx-b200", n_gpus=32), "nvl72": load_cluster("gb200-nvl72", n_gpus=32)}


def _plan(tp: int, pp: int, sched: str, ep: int, ac: str, mb: int, backend: str, routing: str,
          overlap: bool) -> ParallelPlan:
    dp = 32 // (tp * pp)
    return ParallelPlan(tp=tp, pp=pp, pp_schedule=sched if pp > 1 else "1f1b",
                        vpp=2 if (sched == "interleaved-1f1b" and pp > 1) else 1, ep=ep, dp_shard=dp, seq_len=1024,
                        micro_batch=mb, ac=ac, ep_backend=backend, routing=routing, global_batch=dp * mb * 4 * pp,
                        ep_overlap=overlap and (pp == 1 or sched in ("interleaved-1f1b", "dualpipev")))


plans = st.builds(_plan, st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]),
                  st.sampled_from(["1f1b", "interleaved-1f1b", "dualpipev"]), st.sampled_from([2, 4, 8]),
                  st.sampled_from(["selective", "full"]), st.sampled_from([1, 2]), st.sampled_from(["nccl", "deepep"]),
                  st.sampled_from(["balanced", "zipf:0.8"]), st.booleans())


def _fingerprint(pred: Prediction) -> str:
    return json.dumps({"step": pred.step_time_s, "breakdown": pred.breakdown, "hidden": pred.hidden_comm},
                      sort_keys=True)


def _try(plan: ParallelPlan, cluster_name: str, memo: SimMemo | None) -> str | None:
    try:
        return _fingerprint(predict(MODEL, CLUSTERS[cluster_name], plan, stack="megatron", memo=memo))
    except MoesimError:
        return None


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(plans, min_size=3, max_size=6), cluster=st.sampled_from(sorted(CLUSTERS)))
def test_predictions_with_a_shared_memo_equal_predictions_without(batch: list[ParallelPlan], cluster: str) -> None:
    # the same layers under other pipeline layouts: the memo's hits are exercised, not only its misses
    batch = batch + [dataclasses.replace(p, pp=1, pp_schedule="1f1b", vpp=1, dp_shard=p.dp_shard * p.pp,
                                         ep_overlap=p.ep_overlap and p.pp_schedule != "dualpipev")
                     for p in batch if p.pp > 1]
    batch += [dataclasses.replace(p, pp=2, dp_shard=p.dp_shard // 2, global_batch=p.global_batch)
              for p in batch if p.pp == 4]
    memo = SimMemo()
    shared = [_try(p, cluster, memo) for p in batch]
    alone = [_try(p, cluster, None) for p in batch]
    assert shared == alone


def test_plans_that_differ_only_in_pipeline_layout_share_their_layers() -> None:
    memo = SimMemo()
    a = ParallelPlan(tp=1, pp=2, pp_schedule="1f1b", ep=8, dp_shard=16, seq_len=1024, global_batch=64)
    b = dataclasses.replace(a, pp=4, pp_schedule="interleaved-1f1b", vpp=2, dp_shard=8, global_batch=128)
    predict(MODEL, CLUSTERS["hgx"], a, memo=memo)
    misses = memo.misses
    predict(MODEL, CLUSTERS["hgx"], b, memo=memo)
    assert memo.misses == misses and memo.hits >= misses
    assert PIPELINE_FIELDS < set(f.name for f in dataclasses.fields(ParallelPlan))
    # single-stage plans gather FSDP shards inside each layer: their data-parallel width is part of the key
    one = dataclasses.replace(a, pp=1, dp_shard=32, global_batch=64)
    assert layer_sim_key(one, []) != layer_sim_key(dataclasses.replace(one, dp_shard=16, dp_replicate=2), [])


def test_a_memo_serves_one_scope_and_drops_another_scopes_results() -> None:
    memo = SimMemo()
    plan = ParallelPlan(tp=1, pp=2, ep=8, dp_shard=16, seq_len=1024, global_batch=64)
    predict(MODEL, CLUSTERS["hgx"], plan, memo=memo)
    hits = memo.hits
    other = dataclasses.replace(CLUSTERS["hgx"], nic_bw_bytes_per_s=CLUSTERS["hgx"].nic_bw_bytes_per_s * 2)
    got = predict(MODEL, other, plan, memo=memo)
    assert memo.hits == hits  # nothing of the first cluster's layers answered for the second
    assert _fingerprint(got) == _fingerprint(predict(MODEL, other, plan))
    costs = default_costs(CLUSTERS["hgx"].gpu)
    memo.bind(MODEL, CLUSTERS["hgx"], costs, load_stack("torchtitan"))
    assert memo.get("k", lambda: 1) == 1
    memo.bind(MODEL, CLUSTERS["hgx"], costs, load_stack("torchtitan"))  # an equal scope keeps its results
    assert memo.get("k", lambda: 2) == 1
    memo.bind(MODEL, CLUSTERS["hgx"], costs, load_stack("megatron"))
    assert memo.get("k", lambda: 3) == 3
