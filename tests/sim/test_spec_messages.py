"""Specs and entry points reject bad values with a message that names the owner, the field and the value."""

from __future__ import annotations

import dataclasses

import pytest

from sim.catalog import load_cluster, load_gpu, load_model
from sim.errors import CatalogError, ConfigError, PlanError
from sim.specs import ParallelPlan


def test_cluster_fields_are_checked() -> None:
    c = load_cluster("hgx-b200", n_gpus=16)
    with pytest.raises(ConfigError, match="nvlink_domain_gpus"):
        dataclasses.replace(c, nvlink_domain_gpus=0)
    with pytest.raises(ConfigError, match="nvlink_bw_bytes_per_s"):
        dataclasses.replace(c, nvlink_bw_bytes_per_s=-1.0)
    dataclasses.replace(c, nvlink_bw_bytes_per_s=0.0)  # no NVLink: allowed


def test_plan_errors_start_with_plan() -> None:
    with pytest.raises(ConfigError, match=r"^plan: tp"):
        ParallelPlan(tp=0)


@pytest.mark.parametrize("backend", ["deepep", "hybridep"])
def test_deepep_sms_must_leave_sms_for_compute(backend: str) -> None:
    """DeepEP's and HybridEP's kernels both hold deepep_sms SMs: all of them is refused."""
    from sim.predict import validate_plan

    gpu = load_gpu("b200")
    plan = ParallelPlan(ep=8, dp_shard=8, global_batch=8, ep_backend=backend, deepep_sms=gpu.num_sms)
    with pytest.raises(PlanError, match=rf"plan: deepep_sms \({gpu.num_sms}\) must be below the GPU's {gpu.num_sms} SMs"):
        validate_plan(load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=8), plan)


def test_unknown_cluster_and_bad_rank_lists_are_named() -> None:
    from sim.comm import CommCosts, moe_alltoall, p2p_time

    with pytest.raises(CatalogError, match="unknown cluster 'nope'"):
        load_cluster("nope")
    cluster = load_cluster("hgx-b200", n_gpus=8)
    with pytest.raises(ConfigError, match="p2p_time"):
        p2p_time(cluster, 0, 99, 1e6, CommCosts.default())
    with pytest.raises(ConfigError, match="moe_alltoall"):
        moe_alltoall(cluster, [0, 99], 16, load_model("debug"), "nccl", "dispatch", CommCosts.default(),
                     bytes_per_elem=2.0)


def test_empty_stack_name_is_refused() -> None:
    from sim.stacks import load_stack

    with pytest.raises(ConfigError, match="stack"):
        load_stack("")


def test_engine_has_the_gpus_sms() -> None:
    from sim.costs import default_costs
    from sim.predict.layers import _engine
    from sim.predict.timing import Context
    from sim.stacks import load_stack

    cluster = load_cluster("hgx-b200", n_gpus=8)
    ctx = Context(load_model("debug"), cluster, ParallelPlan(ep=4, dp_shard=8, global_batch=8, seq_len=256),
                  default_costs(cluster.gpu), load_stack("torchtitan"))
    assert _engine(ctx).num_sms == cluster.gpu.num_sms == 148


def test_tied_embeddings_have_no_output_matrix() -> None:
    from sim.accounting import count_params

    m = load_model("debug")
    tied, untied = dataclasses.replace(m, tie_embeddings=True), dataclasses.replace(m, tie_embeddings=False)
    assert count_params(untied).total - count_params(tied).total == m.vocab_size * m.dim
    assert count_params(tied).output == 0


def test_cp_comm_type_is_a_choice_and_needs_context_parallelism() -> None:
    with pytest.raises(ConfigError, match=r"^plan: cp_comm_type must be one of p2p, a2a; got 'ring'"):
        ParallelPlan(cp=2, dp_shard=1, cp_comm_type="ring")
    with pytest.raises(ConfigError, match=r"^plan: cp_comm_type 'a2a' needs context parallelism \(cp > 1\)"):
        ParallelPlan(cp_comm_type="a2a")
    assert ParallelPlan(cp=2, cp_comm_type="a2a").cp_comm_type == "a2a"
