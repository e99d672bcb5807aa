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
