"""DeepEP low-latency kernels: the published latency table, scaled by bytes and link rate (ledger form)."""

from __future__ import annotations

import dataclasses

import pytest

from sim import comm
from sim.catalog import load_cluster, load_model

MODEL = load_model("deepseek-v3-671b")
COSTS = comm.CommCosts.default()


def _ll(cluster, n: int, tokens: int, phase: str, bytes_per_elem: float) -> comm.AllToAllResult:
    return comm.moe_alltoall(cluster, list(range(n)), tokens, MODEL, "deepep-ll", phase, COSTS,
                             bytes_per_elem=bytes_per_elem)


def test_reference_shape_reproduces_the_published_table_across_nodes() -> None:
    """128 tokens x top-8 x 7168, FP8 dispatch and BF16 combine, on H800 with one 400G NIC: the table itself."""
    cluster = load_cluster("h800-deepseek", n_gpus=16)
    assert float(_ll(cluster, 16, 128, "dispatch", 1.0).time_s.max()) == pytest.approx(118e-6)
    assert float(_ll(cluster, 16, 128, "combine", 2.0).time_s.max()) == pytest.approx(195e-6)
    # linear in bytes: twice the tokens, twice the time; BF16 dispatch moves twice the FP8 bytes
    assert float(_ll(cluster, 16, 256, "dispatch", 1.0).time_s.max()) == pytest.approx(236e-6)
    assert float(_ll(cluster, 16, 128, "dispatch", 2.0).time_s.max()) == pytest.approx(236e-6)


def test_link_rate_scales_the_table() -> None:
    cluster = load_cluster("h800-deepseek", n_gpus=16)
    fast = dataclasses.replace(cluster, nic_bw_bytes_per_s=2 * cluster.nic_bw_bytes_per_s)
    assert float(_ll(fast, 16, 128, "combine", 2.0).time_s.max()) == pytest.approx(195e-6 / 2)
    # inside one NVLink domain the achievable NVLink rate scales it (H800's 160 GB/s is the reference)
    from sim.comm.fabric import nvlink_fraction

    one_node = load_cluster("h800-deepseek", n_gpus=8)
    nvl = one_node.nvlink_bw * nvlink_fraction(one_node, COSTS)
    assert float(_ll(one_node, 8, 128, "dispatch", 1.0).time_s.max()) == pytest.approx(77e-6 * 160e9 / nvl)


def test_sms_and_no_host_stall() -> None:
    res = _ll(load_cluster("h800-deepseek", n_gpus=16), 16, 128, "dispatch", 1.0)
    # ceil(E / ceil(E / SMs)) with E = 256, 132 SMs: ceil(256 / 2) = 128
    assert res.sms_used == 128 and res.host_sync_s == 0.0 and res.backend == "deepep-ll"
