"""Host syncs per DeepEP dispatch are the stack's (TorchTitan's glue adds four to DeepEP's own wait), each a
``host_sync_s`` stall on the critical path; NCCL's split-size copy stays one; bad values are refused."""

from __future__ import annotations

import dataclasses

import pytest

from sim.catalog import load_cluster, load_model
from sim.errors import ConfigError
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.stacks import StackProfile, load_stack

PLAN = dict(ep=8, dp_shard=8, global_batch=16, seq_len=512)


def _host_sync_s(backend: str, syncs: int) -> float:
    stack = dataclasses.replace(load_stack("torchtitan"), deepep_host_syncs=syncs)
    pred = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
                   ParallelPlan(ep_backend=backend, **PLAN), stack=stack)  # type: ignore[arg-type]
    return float(pred.breakdown.get("host_sync", 0.0))


def test_each_deepep_sync_is_one_more_stall() -> None:
    one, five = _host_sync_s("deepep", 1), _host_sync_s("deepep", 5)
    assert one > 0
    assert five == pytest.approx(5 * one, rel=1e-6)


def test_nccl_split_copy_is_one_sync_whatever_the_deepep_count() -> None:
    assert _host_sync_s("nccl", 5) == pytest.approx(_host_sync_s("nccl", 1), rel=1e-9)


def test_torchtitan_names_its_five_syncs() -> None:
    stack = load_stack("torchtitan")
    assert stack.deepep_host_syncs == 5
    assert "repeat_interleave" in stack.sources["deepep_host_syncs"]
    assert load_stack("megatron").deepep_host_syncs == 1


@pytest.mark.parametrize("bad", [0, -1, 65, True, 2.5])
def test_bad_counts_name_the_field(bad: object) -> None:
    with pytest.raises(ConfigError, match="deepep_host_syncs"):
        StackProfile(deepep_host_syncs=bad)  # type: ignore[arg-type]


def _hybridep_host_sync_s(stack_name: str, syncs: int | None = None) -> float:
    stack = load_stack(stack_name)
    if syncs is not None:
        stack = dataclasses.replace(stack, hybridep_host_syncs=syncs)
    pred = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
                   ParallelPlan(ep_backend="hybridep", **PLAN), stack=stack)  # type: ignore[arg-type]
    return float(pred.breakdown.get("host_sync", 0.0))


def test_megatron_dropless_hybridep_waits_on_the_host_once_per_forward_dispatch() -> None:
    """Megatron-LM (the Bridge tags' submodule commits) passes no num_permuted_tokens in dropless mode, so
    Hybrid-EP's dispatch_with_permute is not non_blocking; a caller that gives the count does not wait."""
    stack = load_stack("megatron")
    assert stack.hybridep_host_syncs == 1
    assert "num_permuted_tokens" in stack.sources["hybridep_host_syncs"]
    assert load_stack("megatron-26.02").hybridep_host_syncs == 1
    assert load_stack("torchtitan").hybridep_host_syncs == 0
    one = _hybridep_host_sync_s("megatron")
    assert one > 0
    assert _hybridep_host_sync_s("megatron", 0) == 0.0
    # one stall per forward dispatch (fwd + no recompute here; the backward reuses the handle): the same count
    # as NCCL's split-size copy on the same plan and stack
    nccl = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8), ParallelPlan(ep_backend="nccl", **PLAN),
                   stack=load_stack("megatron"))  # type: ignore[arg-type]
    assert one == pytest.approx(float(nccl.breakdown.get("host_sync", 0.0)), rel=1e-6)


@pytest.mark.parametrize("bad", [-1, 65, True, 1.5])
def test_bad_hybridep_counts_name_the_field(bad: object) -> None:
    with pytest.raises(ConfigError, match="hybridep_host_syncs"):
        StackProfile(hybridep_host_syncs=bad)  # type: ignore[arg-type]
