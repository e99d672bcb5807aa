"""Faster hardware never makes a predicted step slower: on every measured run's plan, 25% more FLOPS or
HBM bandwidth, twice the NIC line rate or 50% more NVLink bandwidth give a step no longer than before.
Every step runs GEMMs and memory-bound kernels, so more FLOPS and more HBM bandwidth make every one of
them strictly faster; communication over NICs and NVLink is exposed in some of them, which the wider
links then speed up."""

from __future__ import annotations

import dataclasses

import pytest

from sim.costs import default_costs
from sim.measured_runs import resolve_run
from sim.specs import ClusterSpec
from studies._sim import predict_run
from studies.dataset import load_runs


def _faster(cluster: ClusterSpec, what: str) -> ClusterSpec:
    g = cluster.gpu
    if what == "flops":
        gpu = dataclasses.replace(g, bf16_flops=g.bf16_flops * 1.25, fp8_flops=g.fp8_flops * 1.25,
                                  fp4_flops=g.fp4_flops * 1.25)
        return dataclasses.replace(cluster, gpu=gpu)
    if what == "hbm":
        return dataclasses.replace(cluster, gpu=dataclasses.replace(g, hbm_bw_bytes_per_s=g.hbm_bw_bytes_per_s * 1.25))
    if what == "nic":
        return dataclasses.replace(cluster, nic_bw_bytes_per_s=cluster.nic_bw_bytes_per_s * 2)
    return dataclasses.replace(cluster, nvlink_bw_bytes_per_s=cluster.nvlink_bw * 1.5)


#: runs whose predicted step is at least this share host-bound (the host floor, ``host_issue``): more FLOPS or
#: HBM bandwidth need not speed them up
HOST_BOUND_SHARE = 0.05


@pytest.fixture(scope="module")
def ratios() -> dict[str, dict[str, float]]:
    """run id -> what was made faster -> faster step / step (and ``host``: the step's host-bound share)."""
    out: dict[str, dict[str, float]] = {}
    for run in load_runs():
        model, cluster, plan = resolve_run(run)
        pred = predict_run(model, cluster, plan, run.stack)
        base = pred.step_time_s
        out[run.id] = {"host": pred.breakdown.get("host_issue", 0.0) / base}
        for what in ("flops", "hbm", "nic", "nvlink"):
            faster = _faster(cluster, what)
            step = predict_run(model, faster, plan, run.stack, costs=default_costs(faster.gpu)).step_time_s
            out[run.id][what] = step / base
    return out


def test_no_faster_link_or_unit_makes_a_step_slower(ratios: dict[str, dict[str, float]]) -> None:
    slower = {(run, what): r for run, by in ratios.items() for what, r in by.items() if what != "host" and r > 1 + 1e-9}
    assert not slower, slower


@pytest.mark.parametrize("what", ["flops", "hbm"])
def test_more_flops_or_hbm_bandwidth_speed_up_every_step(ratios: dict[str, dict[str, float]], what: str) -> None:
    """Every step the GPU bounds; a step partly held by the host floor (a few of the dataset's) gains less."""
    gpu_bound = {run: by for run, by in ratios.items() if by["host"] < HOST_BOUND_SHARE}
    assert len(gpu_bound) >= len(ratios) - 3, {run: by["host"] for run, by in ratios.items()}
    assert all(by[what] < 0.995 for by in gpu_bound.values()), {run: by[what] for run, by in gpu_bound.items()}


@pytest.mark.parametrize("what", ["nic", "nvlink"])
def test_wider_links_speed_up_the_runs_that_expose_their_communication(ratios: dict[str, dict[str, float]],
                                                                       what: str) -> None:
    assert sum(by[what] < 0.99 for by in ratios.values()) >= 3, {run: by[what] for run, by in ratios.items()}
