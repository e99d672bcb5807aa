"""Exact timelines of the SimPy engine on hand-computable cases."""

import pytest

from sim.engine import Engine, Task


def test_serial_is_the_sum():
    eng = Engine(num_sms=100)
    a = eng.add(0, Task("gemm", "compute", 1.0))
    b = eng.add(0, Task("a2a", "comm", 2.0, deps=(a,)))
    eng.add(0, Task("gemm2", "compute", 0.5, deps=(b,)))
    assert eng.run() == 3.5
    assert eng.timeline(0) == [("gemm", 0.0, 1.0), ("a2a", 1.0, 3.0), ("gemm2", 3.0, 3.5)]


def test_full_overlap_is_the_max():
    eng = Engine(num_sms=100)
    eng.add(0, Task("gemm", "compute", 3.0))
    eng.add(0, Task("all_gather", "comm", 2.0))
    assert eng.run() == 3.0
    assert eng.timeline(0) == [("gemm", 0.0, 3.0), ("all_gather", 0.0, 2.0)]


@pytest.mark.parametrize("k,c,a", [(4, 1.0, 0.5), (4, 0.5, 1.0), (3, 1.0, 1.0)])
def test_k_chunk_pipelining_closed_form(k, c, a):
    """Chunk i's send waits for chunk i's compute; compute runs ahead: k*c + a if a <= c else c + k*a."""
    eng = Engine(num_sms=100)
    for i in range(k):
        h = eng.add(0, Task(f"c{i}", "compute", c))
        eng.add(0, Task(f"s{i}", "comm", a, deps=(h,)))
    expected = k * c + a if a <= c else c + k * a
    assert eng.run() == pytest.approx(expected, abs=1e-12)
    if a <= c:
        assert [t for t in eng.timeline(0) if t[0].startswith("s")][-1] == ("s%d" % (k - 1), k * c, k * c + a)


def test_collective_waits_for_its_slowest_member():
    eng = Engine(num_sms=100)
    for rank, work in enumerate((1.0, 3.0, 2.0)):
        h = eng.add(rank, Task("gemm", "compute", work))
        eng.add(rank, Task("a2a", "comm", 0.5, deps=(h,), collective="dispatch"))
    assert eng.run() == 3.5
    assert eng.timeline(0) == [("gemm", 0.0, 1.0), ("a2a", 3.0, 3.5)]
    assert eng.timeline(1) == [("gemm", 0.0, 3.0), ("a2a", 3.0, 3.5)]


def test_sm_sharing_slows_concurrent_compute():
    """20 of 100 SMs held for [0, 2): the GEMM runs at 80% there, full speed after."""
    eng = Engine(num_sms=100)
    eng.add(0, Task("gemm", "compute", 1.0))
    eng.add(0, Task("dispatch", "comm", 2.0, sms=20))
    eng.add(0, Task("gemm2", "compute", 1.0))
    assert eng.run() == pytest.approx(2.4)
    log = eng.timeline(0)
    assert log[0] == ("gemm", 0.0, 1.25)
    assert log[1] == ("dispatch", 0.0, 2.0)
    assert log[2][0] == "gemm2" and log[2][1] == 1.25 and log[2][2] == pytest.approx(2.4)


def test_host_sync_stalls_every_later_task():
    eng = Engine(num_sms=100)
    a = eng.add(0, Task("gemm", "compute", 1.0))
    eng.add(0, Task("a2a.host_sync", "compute", 0.25, deps=(a,), host_sync=True))
    eng.add(0, Task("all_gather", "comm", 1.0))  # issued after the sync on the host: waits for it
    assert eng.run() == 2.25
    assert eng.timeline(0) == [("gemm", 0.0, 1.0), ("a2a.host_sync", 1.0, 1.25), ("all_gather", 1.25, 2.25)]


def test_bad_dependency_is_rejected():
    eng = Engine(num_sms=10)
    with pytest.raises(ValueError):
        eng.add(0, Task("x", "compute", 1.0, deps=(5,)))
