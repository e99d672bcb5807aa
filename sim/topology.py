"""The cluster as a graph of links, routes over it, and max-min fair sharing of those links.

:func:`build_topology` turns a :class:`~sim.specs.ClusterSpec` into a :class:`networkx.DiGraph`:

- ``("gpu", i)`` for GPU (= rank) ``i``; ``("nvswitch", d)`` for NVLink domain ``d = i // nvlink_domain_gpus``
  (an 8-GPU HGX node or a 72-GPU NVL72 rack);
- ``("nic", i, j)`` for NIC ``j`` of GPU ``i``;
- ``("leaf", g, r)``: rail leaf ``r`` of leaf group ``g = node // fabric.nodes_per_leaf``. Rail-optimized:
  NIC ``j`` of local GPU ``l`` goes to rail ``l * nics_per_gpu + j``; ``kind="fat-tree"``: one leaf per group;
- ``("spine", 0)`` (2 tiers) or ``("spine", g)`` per leaf group plus ``("core", 0)`` (3 tiers).

Spines and cores are aggregated into one logical switch per layer (per leaf group for 3-tier spines): the
fluid equivalent of perfectly balanced ECMP. Capacity lives on the uplinks: a leaf's uplink is its
downlink capacity (``nodes_per_leaf`` NIC ports) divided by ``leaf_oversubscription``; a 3-tier spine's
uplink to the core is its group's leaf uplinks divided by ``spine_oversubscription``. Every edge exists
in both directions with ``bw_bytes_per_s``, ``latency_s`` and ``kind`` (``nvlink``, ``pcie``, ``nic``,
``fabric``). The GPU-NIC (PCIe) edge carries the NIC rate; PCIe is not modelled separately.

Latencies (published.md section 3: NVLink ~1 us, IB ~2 us per switch round trip, leaf-spine ~+1 us): each
NVLink edge carries ``nvlink_latency_s / 2``, each GPU-NIC edge ``fabric.nic_latency_s / 2``, each
switch-to-switch edge ``fabric.hop_latency_s / 2``.

Routing (:func:`route`): inside one NVLink domain GPU -> NVSwitch -> GPU. Between domains the path leaves
through NIC ``j = dst % nics_per_gpu`` and, when the source's rail differs from the destination's, first
hops over NVLink to the GPU in the source node that sits on the destination's rail (NCCL's PXN, on by
default in NCCL), so the inter-node part stays on one rail: leaf only inside a leaf group, via the spine
between groups, via spine-core-spine between 3-tier groups. ``pxn=False`` (DeepEP low-latency's IBGDA)
leaves through the source's own NIC and crosses rails at the spine.

Sharing (:func:`max_min_fair_rates`, :func:`transfer_times`): progressive filling over a flows x path
matrix of edge ids, vectorised with numpy; completions are event driven (rates recomputed each time a
flow finishes) plus the path latency.

>>> from sim.catalog import load_cluster
>>> topo = build_topology(load_cluster("hgx-b200", n_gpus=16))
>>> [v for _, v in route(topo, 0, 9)]
[('nvswitch', 0), ('gpu', 1), ('nic', 1, 0), ('leaf', 0, 1), ('nic', 9, 0), ('gpu', 9)]
>>> transfer_times(topo, [Flow(0, 1, 450e9), Flow(2, 1, 450e9)]).round(6).tolist()
[1.000001, 1.000001]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import networkx as nx
import numpy as np

from sim.errors import ConfigError
from sim.specs import ClusterSpec

__all__ = [
    "Flow",
    "build_topology",
    "route",
    "route_edge_ids",
    "bottleneck_bw",
    "path_latency",
    "max_min_fair_rates",
    "max_min_fair_rates_ids",
    "transfer_times",
    "transfer_times_ids",
    "EDGE_KINDS",
]

Node = tuple[Any, ...]
Edge = tuple[Node, Node]
EDGE_KINDS = ("nvlink", "pcie", "nic", "fabric")
_MAX_HOPS = 10  # nvlink x2, gpu-nic, nic-leaf, up to 4 switch hops, leaf-nic, nic-gpu


class Flow(NamedTuple):
    """``bytes`` from GPU ``src`` to GPU ``dst``, starting at time 0."""

    src: int
    dst: int
    bytes: float


def _rails(cluster: ClusterSpec) -> int:
    if cluster.fabric.kind == "rail-optimized":
        return cluster.gpus_per_node * cluster.nics_per_gpu
    return 1


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of a non-decreasing array, in order (np.unique would import numpy.ma: 17 ms of
    every command's start-up)."""
    if values.size == 0:
        return values
    return values[np.concatenate(([True], values[1:] != values[:-1]))]


def build_topology(cluster: ClusterSpec, gpus: Iterable[int] | None = None) -> nx.DiGraph:
    """The link graph of ``cluster``, or of the smallest part of it that carries traffic among ``gpus``.

    With ``gpus`` given, only their nodes (all GPUs of each, for PXN relays), NVLink domains, NICs, leaf
    groups and the switches above are built; link capacities are the same as in the full graph.

    >>> from sim.catalog import load_cluster
    >>> topo = build_topology(load_cluster("hgx-b200", n_gpus=512), gpus=[0, 300])
    >>> topo.number_of_nodes(), topo[("leaf", 0, 0)][("spine", 0)]["bw_bytes_per_s"]
    (51, 1600000000000.0)
    """
    c, f = cluster, cluster.fabric
    gpn, npg, dom = c.gpus_per_node, c.nics_per_gpu, c.nvlink_domain_gpus
    if gpus is None:
        nodes = np.arange(c.n_nodes)
    else:
        sel = np.asarray(sorted(set(int(g) for g in gpus)), dtype=np.int64)
        if sel.size and (sel[0] < 0 or sel[-1] >= c.n_gpus):
            raise ConfigError(f"build_topology: gpus must lie in [0, n_gpus={c.n_gpus}); got {sel.tolist()}")
        nodes = _sorted_unique(sel // gpn)
    gpu_ids = (nodes[:, None] * gpn + np.arange(gpn)[None, :]).ravel()
    gpu_ids = gpu_ids[gpu_ids < max(c.n_gpus, gpn)]
    rails = _rails(c)
    groups = _sorted_unique(nodes // f.nodes_per_leaf)
    ports = f.nodes_per_leaf * (1 if rails > 1 else gpn * npg)
    leaf_up_bw = ports * c.nic_bw_bytes_per_s / f.leaf_oversubscription
    spine_up_bw = rails * leaf_up_bw / f.spine_oversubscription

    g = nx.DiGraph(cluster=c)
    edges: list[Edge] = []
    cap: list[float] = []
    lat: list[float] = []
    kind: list[int] = []

    def link(u: Node, v: Node, bw: float, latency: float, k: int) -> int:
        eid = len(edges)
        for a, b in ((u, v), (v, u)):
            g.add_edge(a, b, bw_bytes_per_s=bw, latency_s=latency, kind=EDGE_KINDS[k], eid=len(edges))
            edges.append((a, b))
            cap.append(bw)
            lat.append(latency)
            kind.append(k)
        return eid

    n_loc = len(gpu_ids)
    e_gpu_sw = np.empty(n_loc, np.int64)
    e_gpu_nic = np.empty((n_loc, npg), np.int64)
    e_nic_leaf = np.empty((n_loc, npg), np.int64)
    nvl_lat, nic_lat, hop_lat = c.nvlink_latency_s / 2, f.nic_latency_s / 2, f.hop_latency_s / 2
    for li, i in enumerate(gpu_ids.tolist()):
        g.add_node(("gpu", i))
        e_gpu_sw[li] = link(("gpu", i), ("nvswitch", i // dom), c.nvlink_bw, nvl_lat, 0)
        node = i // gpn
        for j in range(npg):
            rail = (i % gpn) * npg + j if rails > 1 else 0
            e_gpu_nic[li, j] = link(("gpu", i), ("nic", i, j), c.nic_bw_bytes_per_s, nic_lat, 1)
            leaf = ("leaf", node // f.nodes_per_leaf, rail)
            e_nic_leaf[li, j] = link(("nic", i, j), leaf, c.nic_bw_bytes_per_s, 0.0, 2)
    e_leaf_spine = np.empty((len(groups), rails), np.int64)
    e_spine_core = np.full(len(groups), -1, np.int64)
    for gl, grp in enumerate(groups.tolist()):
        spine = ("spine", 0) if f.tiers == 2 else ("spine", grp)
        for r in range(rails):
            e_leaf_spine[gl, r] = link(("leaf", grp, r), spine, leaf_up_bw, hop_lat, 3)
        if f.tiers == 3:
            e_spine_core[gl] = link(spine, ("core", 0), spine_up_bw, hop_lat, 3)
    g.graph.update(
        gpus=gpu_ids,
        groups=groups,
        edge_list=edges,
        capacity=np.asarray(cap, dtype=float),
        latency=np.asarray(lat, dtype=float),
        edge_kind=np.asarray(kind, dtype=np.int64),
        # Each "up" id below is even; the reverse ("down") edge is id + 1.
        e_gpu_sw=e_gpu_sw,
        e_gpu_nic=e_gpu_nic,
        e_nic_leaf=e_nic_leaf,
        e_leaf_spine=e_leaf_spine,
        e_spine_core=e_spine_core,
    )
    return g


def _local(topo: nx.DiGraph, ids: np.ndarray, what: str) -> np.ndarray:
    table = topo.graph["gpus"]
    pos = np.searchsorted(table, ids)
    pos_c = np.minimum(pos, len(table) - 1)
    if ids.size and not np.all(table[pos_c] == ids):
        bad = ids[table[pos_c] != ids]
        raise ConfigError(f"{what}: GPUs {bad[:8].tolist()} are not in this topology")
    return pos_c


def route_edge_ids(topo: nx.DiGraph, src: np.ndarray, dst: np.ndarray, *, pxn: bool = True) -> np.ndarray:
    """Edge ids of the route of every (src, dst) pair, as an (F x 10) array padded with -1.

    The vectorised form of :func:`route`: ``topo.graph["edge_list"][k]`` is the edge with id ``k``.

    >>> from sim.catalog import load_cluster
    >>> topo = build_topology(load_cluster("hgx-b200", n_gpus=8))
    >>> route_edge_ids(topo, np.array([0]), np.array([3]))[0].tolist()
    [0, 19, -1, -1, -1, -1, -1, -1, -1, -1]
    """
    gr = topo.graph
    c: ClusterSpec = gr["cluster"]
    f = c.fabric
    gpn, npg, dom, rails = c.gpus_per_node, c.nics_per_gpu, c.nvlink_domain_gpus, _rails(c)
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    ls, ld = _local(topo, src, "route"), _local(topo, dst, "route")
    out = np.full((src.size, _MAX_HOPS), -1, dtype=np.int64)
    e_gpu_sw = gr["e_gpu_sw"]

    intra = (src // dom == dst // dom) & (src != dst)
    out[intra, 0] = e_gpu_sw[ls[intra]]
    out[intra, 1] = e_gpu_sw[ld[intra]] + 1

    inter = src // dom != dst // dom
    s, d, lsi, ldi = src[inter], dst[inter], ls[inter], ld[inter]
    j = d % npg
    relay = (s % gpn != d % gpn) if (pxn and rails > 1) else np.zeros(s.size, bool)
    x = np.where(relay, (s // gpn) * gpn + d % gpn, s)
    lx = _local(topo, x, "route (PXN relay)")
    sub = np.full((s.size, _MAX_HOPS), -1, dtype=np.int64)
    sub[relay, 0] = e_gpu_sw[lsi[relay]]
    sub[relay, 1] = e_gpu_sw[lx[relay]] + 1
    sub[:, 2] = gr["e_gpu_nic"][lx, j]
    sub[:, 3] = gr["e_nic_leaf"][lx, j]
    rail_x = ((x % gpn) * npg + j) if rails > 1 else np.zeros_like(x)
    rail_d = ((d % gpn) * npg + j) if rails > 1 else np.zeros_like(d)
    gs, gd = (x // gpn) // f.nodes_per_leaf, (d // gpn) // f.nodes_per_leaf
    gls, gld = np.searchsorted(gr["groups"], gs), np.searchsorted(gr["groups"], gd)
    via_spine = (gs != gd) | (rail_x != rail_d)
    sub[via_spine, 4] = gr["e_leaf_spine"][gls[via_spine], rail_x[via_spine]]
    sub[via_spine, 7] = gr["e_leaf_spine"][gld[via_spine], rail_d[via_spine]] + 1
    if f.tiers == 3:
        via_core = gs != gd
        sub[via_core, 5] = gr["e_spine_core"][gls[via_core]]
        sub[via_core, 6] = gr["e_spine_core"][gld[via_core]] + 1
    sub[:, 8] = gr["e_nic_leaf"][ldi, j] + 1
    sub[:, 9] = gr["e_gpu_nic"][ldi, j] + 1
    out[inter] = sub
    return out


def route(topo: nx.DiGraph, src_gpu: int, dst_gpu: int, *, pxn: bool = True) -> list[Edge]:
    """The edges a transfer from ``src_gpu`` to ``dst_gpu`` crosses, in order (empty when equal).

    >>> from sim.catalog import load_cluster
    >>> topo = build_topology(load_cluster("hgx-b200", n_gpus=16))
    >>> route(topo, 0, 3)
    [(('gpu', 0), ('nvswitch', 0)), (('nvswitch', 0), ('gpu', 3))]
    """
    cache = topo.graph.setdefault("route_cache", {})
    key = (int(src_gpu), int(dst_gpu), pxn)
    if key not in cache:
        ids = route_edge_ids(topo, np.array([src_gpu]), np.array([dst_gpu]), pxn=pxn)[0]
        cache[key] = [topo.graph["edge_list"][k] for k in ids.tolist() if k >= 0]
    return list(cache[key])


def bottleneck_bw(topo: nx.DiGraph, path: Sequence[Edge]) -> float:
    """The smallest ``bw_bytes_per_s`` along ``path`` (infinite for an empty path).

    >>> from sim.catalog import load_cluster
    >>> topo = build_topology(load_cluster("hgx-b200", n_gpus=16))
    >>> bottleneck_bw(topo, route(topo, 0, 8))
    50000000000.0
    """
    return min((topo.edges[e]["bw_bytes_per_s"] for e in path), default=float("inf"))


def path_latency(topo: nx.DiGraph, path: Sequence[Edge]) -> float:
    """The sum of ``latency_s`` along ``path``.

    >>> from sim.catalog import load_cluster
    >>> topo = build_topology(load_cluster("hgx-b200", n_gpus=16))
    >>> round(path_latency(topo, route(topo, 0, 8)) * 1e6, 9)
    2.0
    """
    return float(sum(topo.edges[e]["latency_s"] for e in path))


def _flow_arrays(flows: Sequence[Flow]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    arr = np.asarray([(f[0], f[1], f[2]) for f in flows], dtype=float).reshape(-1, 3)
    if np.any(arr[:, 2] < 0) or not np.all(np.isfinite(arr[:, 2])):
        raise ConfigError("transfer_times: Flow.bytes must be finite and non-negative")
    return arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2]


def _waterfill(paths: np.ndarray, cap_ext: np.ndarray) -> np.ndarray:
    """Max-min fair rates of flows over ``paths`` (k x h ids, pad = len(cap_ext) - 1, capacity inf).

    Progressive filling: raise every unfrozen flow's rate by the smallest fair share left on any link,
    then freeze the flows crossing the links that share saturated. One pass per bottleneck level.
    """
    n_links = cap_ext.size
    rate = np.zeros(paths.shape[0])
    unfrozen = np.ones(paths.shape[0], dtype=bool)
    rem = cap_ext.astype(float).copy()
    while unfrozen.any():
        n = np.bincount(paths[unfrozen].ravel(), minlength=n_links).astype(float)
        n[-1] = 0.0
        used = n > 0
        if not used.any():  # flows without links: unbounded
            rate[unfrozen] = np.inf
            break
        share = np.full(n_links, np.inf)
        share[used] = rem[used] / n[used]
        delta = share.min()
        rate[unfrozen] += delta
        sat = used & (share <= delta * (1 + 1e-12))
        rem[used] -= delta * n[used]
        rem[sat] = 0.0
        unfrozen &= ~sat[paths].any(axis=1)
    return rate


def _ext(cap: np.ndarray) -> np.ndarray:
    return np.append(np.asarray(cap, dtype=float), np.inf)


def max_min_fair_rates(topo: nx.DiGraph, flows: Sequence[Flow], *, pxn: bool = True) -> np.ndarray:
    """Max-min fair rate (bytes/s) of each flow when all share the links at once (progressive filling).

    A flow with an empty route (``src == dst``) gets ``inf``.

    >>> from sim.catalog import load_cluster
    >>> topo = build_topology(load_cluster("hgx-b200", n_gpus=16))
    >>> max_min_fair_rates(topo, [Flow(0, 8, 1.0), Flow(1, 8, 1.0), Flow(2, 3, 1.0)]).tolist()
    [25000000000.0, 25000000000.0, 900000000000.0]
    """
    src, dst, _ = _flow_arrays(flows)
    paths = route_edge_ids(topo, src, dst, pxn=pxn)
    cap = _ext(topo.graph["capacity"])
    return _waterfill(np.where(paths < 0, cap.size - 1, paths), cap)


def max_min_fair_rates_ids(paths: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates of flows given as edge-id paths (rows padded with -1) over ``capacity``.

    >>> # links 0, 1, 2 (capacity 1, 2, 3); flow 0 crosses all three, flows 1-4 one each
    >>> paths = np.array([[0, 1, 2], [0, -1, -1], [1, -1, -1], [2, -1, -1], [2, -1, -1]])
    >>> max_min_fair_rates_ids(paths, np.array([1.0, 2.0, 3.0])).tolist()
    [0.5, 0.5, 1.5, 1.25, 1.25]
    """
    cap = _ext(capacity)
    return _waterfill(np.where(np.asarray(paths) < 0, cap.size - 1, paths), cap)


def transfer_times_ids(
    paths: np.ndarray, nbytes: np.ndarray, capacity: np.ndarray, latency: np.ndarray
) -> np.ndarray:
    """Completion times of flows given as edge-id paths (see :func:`route_edge_ids`), all starting at 0.

    ``capacity`` and ``latency`` are per edge id (callers may pass scaled capacities). Rates are re-shared
    (max-min fair) each time a flow finishes; each flow's path latency is added to its fluid finish time.
    Flows with no bytes or no edges finish at 0.
    """
    cap = _ext(capacity)
    pad = cap.size - 1
    pm = np.where(paths < 0, pad, paths)
    lat = np.append(np.asarray(latency, dtype=float), 0.0)[pm].sum(axis=1)
    remaining = np.asarray(nbytes, dtype=float).copy()
    active = (remaining > 0) & (paths >= 0).any(axis=1)
    done = np.zeros(remaining.size)
    t = 0.0
    while active.any():
        idx = np.flatnonzero(active)
        rates = _waterfill(pm[idx], cap)
        dt = remaining[idx] / rates
        step = dt.min()
        finish = dt <= step * (1 + 1e-12)
        t += step
        remaining[idx] -= rates * step
        done[idx[finish]] = t
        active[idx[finish]] = False
    return np.where(done > 0, done + lat, 0.0)


def transfer_times(topo: nx.DiGraph, flows: Sequence[Flow], *, pxn: bool = True) -> np.ndarray:
    """Completion time (s) of each flow, all starting at 0, sharing links max-min fairly as flows finish.

    >>> from sim.catalog import load_cluster
    >>> topo = build_topology(load_cluster("hgx-b200", n_gpus=16))
    >>> transfer_times(topo, [Flow(0, 8, 50e9), Flow(1, 8, 100e9)]).round(9).tolist()  # 1 -> 8 via PXN
    [2.000002, 3.000003]
    """
    src, dst, nbytes = _flow_arrays(flows)
    paths = route_edge_ids(topo, src, dst, pxn=pxn)
    return transfer_times_ids(paths, nbytes, topo.graph["capacity"], topo.graph["latency"])
