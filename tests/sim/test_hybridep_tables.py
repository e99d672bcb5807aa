"""Hybrid-EP from its published tables (issue 14, item 3): the model reproduces the branch README's kernel-only
algorithm bandwidths at the benchmark's own configuration, predicts the B200 row it was not built from, and
moves with SMs, ranks and link rates the way the tables and the links say."""

from __future__ import annotations

import dataclasses
import math

import pytest

from sim.catalog import load_cluster, load_model
from sim.comm import FP8_WITH_SCALES_BYTES_PER_ELEM, CommCosts, moe_alltoall
from sim.comm.hybridep import hybridep_ib_share, hybridep_nvl_share

COSTS = CommCosts.default()
PHASES = (("dispatch", FP8_WITH_SCALES_BYTES_PER_ELEM, "dispatch_fp8"), ("dispatch", 2.0, "dispatch_bf16"),
          ("combine", 2.0, "combine"))


def _bench_model(ranks: int):  # type: ignore[no-untyped-def]
    """The README's test: hidden 7168, top-8, 8 local experts per rank, random uniform routing."""
    return dataclasses.replace(load_model("deepseek-v3-671b"), n_routed_experts=8 * ranks, n_group=1, topk_group=1)


def _seconds(cluster: str, n_gpus: int, ranks: int, sms: int, phase: str, bpe: float, costs: CommCosts = COSTS) -> float:
    res = moe_alltoall(load_cluster(cluster, n_gpus=n_gpus), range(ranks), 4096, _bench_model(ranks), "hybridep",
                       phase, costs, bytes_per_elem=bpe, num_sms=sms)
    return float(res.time_s.max())


def _algorithm_bw(seconds: float, ranks: int, bpe: float) -> float:
    """Received bytes per rank (own included) / time, as the benchmark counts them."""
    experts = 8 * ranks
    hit = 1 - math.comb(experts - 8, 8) / math.comb(experts, 8)
    return 4096 * 7168 * bpe * hit * ranks / seconds


@pytest.mark.parametrize("ranks", COSTS.hybridep_nvl_ranks)
@pytest.mark.parametrize("sm_index", range(len(COSTS.hybridep_nvl_sms)))
def test_nvl72_table_points_are_reproduced(ranks: int, sm_index: int) -> None:
    sms = COSTS.hybridep_nvl_sms[sm_index]
    for phase, bpe, column in PHASES:
        table = getattr(COSTS, f"hybridep_nvl_{column}_bw")[COSTS.hybridep_nvl_ranks.index(ranks) * 2 + sm_index]
        got = _algorithm_bw(_seconds("gb200-nvl72", 288, ranks, sms, phase, bpe), ranks, bpe)
        assert got == pytest.approx(table, rel=1e-3), (ranks, sms, column)


def test_b200_row_is_predicted_from_the_gb200_table() -> None:
    """The B200 8-rank 16-SM row (kernel only: 599.27 / 734.95 / 673.84 GB/s) is not an input."""
    measured = {"dispatch_fp8": 599.27e9, "dispatch_bf16": 734.95e9, "combine": 673.84e9}
    for phase, bpe, column in PHASES:
        got = _algorithm_bw(_seconds("hgx-b200", 256, 8, 16, phase, bpe), 8, bpe)
        assert got == pytest.approx(measured[column], rel=0.05), column


@pytest.mark.parametrize("ranks", COSTS.hybridep_ib_ranks)
def test_h100_ib_table_points_are_reproduced(ranks: int) -> None:
    """Logical RDMA bytes (every node a token reaches, its own included) / time, at every SM column."""
    experts, nodes = 8 * ranks, ranks // 8
    node_hit = 1 - math.comb(experts - 64, 8) / math.comb(experts, 8)
    for sm_index, sms in enumerate(COSTS.hybridep_ib_sms):
        for phase, bpe, column in PHASES:
            table = getattr(COSTS, f"hybridep_ib_{column}_bw")[COSTS.hybridep_ib_ranks.index(ranks) * 3 + sm_index]
            logical = 4096 * 7168 * bpe * node_hit * nodes
            got = logical / _seconds("hgx-h100", 256, ranks, sms, phase, bpe)
            assert got == pytest.approx(table, rel=1e-3), (ranks, sms, column)


def test_shares_are_flat_beyond_the_tables_and_proportional_below_the_first_sm_column() -> None:
    assert hybridep_nvl_share(64, 32, "combine", 2.0, COSTS) == hybridep_nvl_share(36, 32, "combine", 2.0, COSTS)
    assert hybridep_nvl_share(36, 48, "combine", 2.0, COSTS) == hybridep_nvl_share(36, 32, "combine", 2.0, COSTS)
    assert hybridep_nvl_share(8, 8, "dispatch", 2.0, COSTS) == pytest.approx(
        hybridep_nvl_share(8, 16, "dispatch", 2.0, COSTS) / 2)
    assert hybridep_ib_share(128, 16, "dispatch", 2.0, COSTS) == hybridep_ib_share(64, 16, "dispatch", 2.0, COSTS)
    mid = hybridep_nvl_share(20, 24, "dispatch", 2.0, COSTS)
    corners = [hybridep_nvl_share(r, s, "dispatch", 2.0, COSTS) for r in (16, 24) for s in (16, 32)]
    assert min(corners) < mid < max(corners)


def test_the_tables_are_the_inputs() -> None:
    """Halving one table cell's rate doubles the kernel time at that point; a rate beyond what the links
    carry is capped by the link-limited flow time."""
    at = COSTS.hybridep_nvl_ranks.index(16) * 2 + 1
    base = _seconds("gb200-nvl72", 288, 16, 32, "combine", 2.0)
    for factor, expect in ((0.5, 2.0), (4.0, None)):
        cells = list(COSTS.hybridep_nvl_combine_bw)
        cells[at] *= factor
        t = _seconds("gb200-nvl72", 288, 16, 32, "combine", 2.0, dataclasses.replace(COSTS, hybridep_nvl_combine_bw=tuple(cells)))
        if expect is not None:
            assert t == pytest.approx(base * expect, rel=1e-6)
        else:
            assert base / 4 < t < base


def test_a_faster_nic_speeds_internode_hybridep_and_not_intranode() -> None:
    model = load_model("deepseek-v3-671b")

    def t(nic: int, ranks: int) -> float:
        cluster = dataclasses.replace(load_cluster("hgx-b200", n_gpus=256), nic_bw_bytes_per_s=nic / 8 * 1e9)
        return float(moe_alltoall(cluster, range(ranks), 4096, model, "hybridep", "dispatch", COSTS,
                                  bytes_per_elem=2.0, num_sms=32).time_s.max())

    assert t(800, 32) < 0.6 * t(400, 32)
    assert t(800, 8) == t(400, 8)


def test_sixty_four_ranks_of_an_nvl72_rack_read_the_widest_row() -> None:
    """EP64 inside one rack (the Megatron GB200 runs) is an NVLink case at the 36-rank row's rate."""
    model = load_model("deepseek-v3-671b")
    cluster = load_cluster("gb200-nvl72", n_gpus=288)
    r = moe_alltoall(cluster, range(64), 4096, model, "hybridep", "combine", COSTS, bytes_per_elem=2.0, num_sms=32)
    assert float(r.rdma_bytes.sum()) == 0.0
    assert float(r.time_s.max()) > float(
        moe_alltoall(cluster, range(8), 4096, model, "hybridep", "combine", COSTS, bytes_per_elem=2.0,
                     num_sms=32).time_s.max())


def test_no_assumed_multiple_of_deepep_remains() -> None:
    assert not any("sm_scale" in f.name for f in dataclasses.fields(CommCosts))
