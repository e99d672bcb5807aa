"""sim.topology: graph shape, routes, max-min fair sharing, event-driven completion times."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sim.catalog import load_cluster
from sim.errors import ConfigError
from sim.topology import (
    Flow,
    bottleneck_bw,
    build_topology,
    max_min_fair_rates,
    max_min_fair_rates_ids,
    path_latency,
    route,
    route_edge_ids,
    transfer_times,
    transfer_times_ids,
)

NVL = 900e9  # B200 NVLink per direction
NIC = 50e9  # 400 Gb/s


def _hops(topo, src, dst, **kw):
    path = route(topo, src, dst, **kw)
    assert all(path[i][1] == path[i + 1][0] for i in range(len(path) - 1))
    return [path[0][0]] + [v for _, v in path] if path else []


@pytest.fixture(scope="module")
def hgx16():
    return build_topology(load_cluster("hgx-b200", n_gpus=16))


def test_graph_has_every_kind_of_node_and_both_directions():
    topo = build_topology(load_cluster("hgx-b200", n_gpus=16))
    kinds = {n[0] for n in topo.nodes}
    assert kinds == {"gpu", "nvswitch", "nic", "leaf", "spine"}
    assert sum(n[0] == "gpu" for n in topo.nodes) == 16
    assert sum(n[0] == "leaf" for n in topo.nodes) == 8  # one rail leaf per NIC of a node
    for u, v, data in topo.edges(data=True):
        assert topo.has_edge(v, u)
        assert data["bw_bytes_per_s"] == topo.edges[v, u]["bw_bytes_per_s"]
    assert topo.edges[("gpu", 3), ("nvswitch", 0)]["bw_bytes_per_s"] == NVL
    assert topo.edges[("nic", 3, 0), ("leaf", 0, 3)]["bw_bytes_per_s"] == NIC


def test_route_intra_node(hgx16):
    assert _hops(hgx16, 0, 3) == [("gpu", 0), ("nvswitch", 0), ("gpu", 3)]
    assert route(hgx16, 5, 5) == []


def test_route_same_rail_inter_node(hgx16):
    assert _hops(hgx16, 2, 10) == [("gpu", 2), ("nic", 2, 0), ("leaf", 0, 2), ("nic", 10, 0), ("gpu", 10)]


def test_route_cross_rail_uses_pxn_relay_on_destination_rail(hgx16):
    assert _hops(hgx16, 1, 10) == [
        ("gpu", 1), ("nvswitch", 0), ("gpu", 2), ("nic", 2, 0), ("leaf", 0, 2), ("nic", 10, 0), ("gpu", 10)
    ]
    # without PXN (DeepEP low-latency IBGDA) the rails meet at the spine
    assert _hops(hgx16, 1, 10, pxn=False) == [
        ("gpu", 1), ("nic", 1, 0), ("leaf", 0, 1), ("spine", 0), ("leaf", 0, 2), ("nic", 10, 0), ("gpu", 10)
    ]


def test_route_cross_leaf_goes_through_spine():
    topo = build_topology(load_cluster("hgx-b200", n_gpus=512))
    assert _hops(topo, 0, 256) == [
        ("gpu", 0), ("nic", 0, 0), ("leaf", 0, 0), ("spine", 0), ("leaf", 1, 0), ("nic", 256, 0), ("gpu", 256)
    ]
    assert path_latency(topo, route(topo, 0, 256)) == pytest.approx(3e-6, abs=1e-18)


def test_route_three_tiers_goes_through_core():
    c = load_cluster("hgx-b200", n_gpus=512)
    c = dataclasses.replace(c, fabric=dataclasses.replace(c.fabric, tiers=3))
    topo = build_topology(c)
    assert _hops(topo, 0, 256) == [
        ("gpu", 0), ("nic", 0, 0), ("leaf", 0, 0), ("spine", 0), ("core", 0), ("spine", 1), ("leaf", 1, 0),
        ("nic", 256, 0), ("gpu", 256),
    ]
    assert _hops(topo, 0, 8) == [("gpu", 0), ("nic", 0, 0), ("leaf", 0, 0), ("nic", 8, 0), ("gpu", 8)]


def test_route_nvl72_rack_local_and_cross_rack():
    topo = build_topology(load_cluster("gb200-nvl72", n_gpus=144))
    assert _hops(topo, 0, 71) == [("gpu", 0), ("nvswitch", 0), ("gpu", 71)]  # tray 0 to tray 17, one rack
    assert _hops(topo, 0, 72) == [("gpu", 0), ("nic", 0, 0), ("leaf", 0, 0), ("nic", 72, 0), ("gpu", 72)]


def test_leaf_oversubscription_halves_the_uplink():
    c = load_cluster("hgx-b200", n_gpus=512)
    full = build_topology(c)
    half = build_topology(dataclasses.replace(c, fabric=dataclasses.replace(c.fabric, leaf_oversubscription=2.0)))
    up = (("leaf", 0, 3), ("spine", 0))
    assert full.edges[up]["bw_bytes_per_s"] == 32 * NIC
    assert half.edges[up]["bw_bytes_per_s"] == 32 * NIC / 2
    assert half.edges[up[::-1]]["bw_bytes_per_s"] == 32 * NIC / 2
    # 32 nodes' rail-0 GPUs sending across the leaf boundary at once: the uplink now binds
    flows = [Flow(8 * i, 256 + 8 * i, 1e9) for i in range(32)]
    assert max_min_fair_rates(full, flows).tolist() == [NIC] * 32
    assert max_min_fair_rates(half, flows).tolist() == [NIC / 2] * 32


def test_spine_oversubscription_on_three_tiers():
    c = load_cluster("hgx-b200", n_gpus=512)
    c = dataclasses.replace(c, fabric=dataclasses.replace(c.fabric, tiers=3, spine_oversubscription=4.0))
    topo = build_topology(c)
    assert topo.edges[("spine", 0), ("core", 0)]["bw_bytes_per_s"] == 8 * 32 * NIC / 4


def test_bottleneck_and_latency(hgx16):
    assert bottleneck_bw(hgx16, route(hgx16, 0, 1)) == NVL
    assert bottleneck_bw(hgx16, route(hgx16, 1, 10)) == NIC
    assert bottleneck_bw(hgx16, []) == float("inf")
    assert path_latency(hgx16, route(hgx16, 0, 1)) == pytest.approx(1e-6, abs=1e-18)
    assert path_latency(hgx16, route(hgx16, 1, 10)) == pytest.approx(3e-6, abs=1e-18)


def test_subset_topology_matches_full():
    c = load_cluster("hgx-b200", n_gpus=1024)
    full, part = build_topology(c), build_topology(c, gpus=[3, 260, 900])
    assert part.number_of_nodes() < full.number_of_nodes()
    for u, v, data in part.edges(data=True):
        assert full.edges[u, v]["bw_bytes_per_s"] == data["bw_bytes_per_s"]
        assert full.edges[u, v]["latency_s"] == data["latency_s"]
    assert route(part, 3, 900) == route(full, 3, 900)


def test_two_flows_sharing_one_link_get_half_each(hgx16):
    # both end at GPU 1: its NVLink downlink is shared
    assert max_min_fair_rates(hgx16, [Flow(0, 1, 1.0), Flow(2, 1, 1.0)]).tolist() == [NVL / 2, NVL / 2]
    # both leave through GPU 0's NIC (1 -> 8 relays over NVLink to GPU 0, the rail-0 GPU)
    assert max_min_fair_rates(hgx16, [Flow(0, 8, 1.0), Flow(1, 8, 1.0)]).tolist() == [NIC / 2, NIC / 2]


def test_textbook_max_min_three_links():
    # Bertsekas & Gallager style: one long flow over links of capacity 1, 2, 3 plus one-link flows.
    paths = np.array([[0, 1, 2], [0, -1, -1], [1, -1, -1], [2, -1, -1], [2, -1, -1]])
    rates = max_min_fair_rates_ids(paths, np.array([1.0, 2.0, 3.0]))
    assert rates.tolist() == [0.5, 0.5, 1.5, 1.25, 1.25]
    # feasibility and fairness: every link within capacity, every flow has a saturated bottleneck
    load = np.bincount(paths[paths >= 0], weights=np.repeat(rates, 3)[(paths >= 0).ravel()], minlength=3)
    assert np.all(load <= np.array([1.0, 2.0, 3.0]) + 1e-12)


def test_finishing_flow_frees_bandwidth_closed_form(hgx16):
    a, b, c = 100e9, 300e9, 600e9
    t = transfer_times(hgx16, [Flow(0, 1, a), Flow(2, 1, b), Flow(3, 1, c)])
    lat = 1e-6
    t1 = 3 * a / NVL
    t2 = t1 + 2 * (b - a) / NVL
    t3 = t2 + (c - b) / NVL
    np.testing.assert_allclose(t, [t1 + lat, t2 + lat, t3 + lat], rtol=1e-12)


def test_bottleneck_elsewhere_leaves_share_to_others(hgx16):
    # 0->8 and 1->8 share GPU 0's NIC (50 GB/s) and re-share when 0->8 ends; 2->3 is alone on NVLink
    t = transfer_times(hgx16, [Flow(0, 8, 50e9), Flow(1, 8, 100e9), Flow(2, 3, 900e9)])
    np.testing.assert_allclose(t, [2.0 + 2e-6, 3.0 + 3e-6, 1.0 + 1e-6], rtol=1e-12)


def test_empty_and_zero_flows(hgx16):
    assert transfer_times(hgx16, []).size == 0
    assert transfer_times(hgx16, [Flow(4, 4, 1e9), Flow(0, 1, 0.0)]).tolist() == [0.0, 0.0]
    assert max_min_fair_rates(hgx16, [Flow(4, 4, 1.0)]).tolist() == [float("inf")]


def test_bad_input_raises_config_error(hgx16):
    with pytest.raises(ConfigError, match="not in this topology"):
        route(hgx16, 0, 99)
    with pytest.raises(ConfigError, match="bytes"):
        transfer_times(hgx16, [Flow(0, 1, -1.0)])
    with pytest.raises(ConfigError, match="n_gpus"):
        build_topology(load_cluster("hgx-b200", n_gpus=16), gpus=[16])


def test_vectorised_routes_match_scalar_routes():
    topo = build_topology(load_cluster("hgx-b200", n_gpus=512))
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 512, 200), rng.integers(0, 512, 200)
    ids = route_edge_ids(topo, src, dst)
    for k in range(200):
        edges = [topo.graph["edge_list"][e] for e in ids[k] if e >= 0]
        assert edges == route(topo, int(src[k]), int(dst[k]))


def test_4000_flow_alltoall_closed_form():
    c = load_cluster("hgx-b200", n_gpus=64)
    topo = build_topology(c)
    s, d = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
    keep = s != d
    flows = [Flow(int(a), int(b), 1e6) for a, b in zip(s[keep], d[keep])]
    t = transfer_times(topo, flows)  # speed: benchmarks/bench_sim.py, not a timed test
    assert len(flows) == 4032
    # each GPU pushes 56 MB through its rail (NIC) and 7 MB over NVLink: the NIC binds
    assert t.max() == pytest.approx(56e6 / NIC + 3e-6, rel=1e-9)
    paths = route_edge_ids(topo, s[keep], d[keep])
    np.testing.assert_allclose(
        transfer_times_ids(paths, np.full(4032, 1e6), topo.graph["capacity"], topo.graph["latency"]), t
    )


def test_fat_tree_leaf_takes_every_nic_of_its_nodes():
    c = load_cluster("hgx-b200", n_gpus=512)
    fat = dataclasses.replace(c, fabric=dataclasses.replace(c.fabric, kind="fat-tree"))
    topo = build_topology(fat)
    per_leaf = c.fabric.nodes_per_leaf * c.gpus_per_node * c.nics_per_gpu
    assert topo.edges[("leaf", 0, 0), ("spine", 0)]["bw_bytes_per_s"] == per_leaf * NIC
    assert {v for u, v in topo.out_edges(("leaf", 0, 0)) if v[0] == "nic"} == {
        ("nic", g, 0) for g in range(c.fabric.nodes_per_leaf * c.gpus_per_node)}
    # one leaf per group of nodes, not one per rail: a cross-rail pair inside a leaf never climbs to a spine
    assert all(hop[0] != "spine" for edge in route(topo, 0, 9) for hop in edge)
