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


def test_sm_sharing_switched_off_leaves_compute_at_full_speed():
    """The same case as above without the coupling: the GEMMs ignore the 20 held SMs."""
    eng = Engine(num_sms=100, sm_sharing=False)
    eng.add(0, Task("gemm", "compute", 1.0))
    eng.add(0, Task("dispatch", "comm", 2.0, sms=20))
    eng.add(0, Task("gemm2", "compute", 1.0))
    assert eng.run() == 2.0
    assert eng.timeline(0) == [("gemm", 0.0, 1.0), ("dispatch", 0.0, 2.0), ("gemm2", 1.0, 2.0)]


@pytest.mark.parametrize("sms", [10, 20, 40])
def test_deepep_sms_change_overlapped_compute(sms):
    """A 3 s GEMM under a 1 s kernel holding ``sms`` of 100 SMs: 1 s at (100-s)/100, the rest at full speed."""
    eng = Engine(num_sms=100)
    eng.add(0, Task("gemm", "compute", 3.0))
    eng.add(0, Task("dispatch", "comm", 1.0, sms=sms))
    eng.run()
    rate = (100 - sms) / 100
    assert eng.timeline(0)[0] == ("gemm", 0.0, pytest.approx(1.0 + (3.0 - rate)))


@pytest.mark.parametrize("sms", [100, 130])
def test_kernel_holding_every_sm_pauses_compute(sms):
    """A low-latency kernel may launch one SM per expert, i.e. every SM (or, with another kernel, more):
    a 3 s GEMM under a 1 s kernel holding all 100 SMs makes no progress during that second, ends at 4 s."""
    eng = Engine(num_sms=100)
    eng.add(0, Task("gemm", "compute", 3.0))
    eng.add(0, Task("dispatch", "comm", 1.0, sms=sms))
    assert eng.run() == pytest.approx(4.0)
    assert eng.timeline(0) == [("gemm", 0.0, pytest.approx(4.0)), ("dispatch", 0.0, 1.0)]


def test_two_kernels_over_the_sm_budget_then_one_released():
    """Kernels of 60 and 50 SMs (110 of 100) from 0 to 1; then the 50-SM one alone until 2. The 4 s GEMM runs
    at 0 until 1, at 0.5 until 2 (0.5 s of work), then at full speed: 3.5 s more, ends at 5.5 s."""
    eng = Engine(num_sms=100)
    eng.add(0, Task("gemm", "compute", 4.0))
    eng.add(0, Task("a", "comm", 1.0, sms=60))
    eng.add(0, Task("b", "comm2", 2.0, sms=50))
    assert eng.run() == pytest.approx(5.5)
    assert eng.timeline(0)[0] == ("gemm", 0.0, pytest.approx(5.5))


def test_nic_shared_between_fsdp_and_a2a_flows():
    """NIC of 10 B/s. The a2a flow (40 B, capped at 8 B/s by its own path) starts at 0; the FSDP gather
    (30 B, uncapped) joins at 1. Alone the a2a runs at 8 until 1 (8 B moved); then max-min fair 5 + 5
    until the gather's 30 B are done at 7 (the a2a has moved 8 + 30 = 38 B); the a2a's last 2 B run alone at
    8 B/s: ends at 7.25."""
    eng = Engine(num_sms=100, links={"nic": 10.0})
    eng.add(0, Task("moe.dispatch", "comm", 0.0, link="nic", nbytes=40.0, max_rate=8.0))
    gate = eng.add(0, Task("gemm", "compute", 1.0))
    eng.add(0, Task("fsdp.all_gather", "fsdp_ag", 0.0, deps=(gate,), link="nic", nbytes=30.0))
    assert eng.run() == pytest.approx(7.25)
    assert eng.timeline(0) == [("moe.dispatch", 0.0, pytest.approx(7.25)), ("gemm", 0.0, 1.0),
                               ("fsdp.all_gather", 1.0, pytest.approx(7.0))]


def test_flow_alone_runs_at_its_own_cap_plus_latency():
    eng = Engine(num_sms=100, links={"nic": 100.0})
    eng.add(0, Task("a2a", "comm", 0.5, link="nic", nbytes=10.0, max_rate=5.0))
    assert eng.run() == pytest.approx(2.5)


def test_flows_of_different_ranks_do_not_share_a_nic():
    eng = Engine(num_sms=100, links={"nic": 10.0})
    eng.add(0, Task("a", "comm", 0.0, link="nic", nbytes=10.0))
    eng.add(1, Task("b", "comm", 0.0, link="nic", nbytes=10.0))
    assert eng.run() == pytest.approx(1.0)


def test_host_stall_idles_the_gpu_until_the_cpu_relaunches():
    """A DeepEP normal-mode dispatch: the CPU blocks for the receive counts (0.25 s of host round trip
    after the notify kernel); the expert GEMM, issued after the wait, cannot start before it even though
    the compute stream is free, and the shared-expert GEMM queued before the wait runs under it."""
    eng = Engine(num_sms=100)
    notify = eng.add(0, Task("notify", "comm", 0.5))
    eng.add(0, Task("shared", "compute", 0.25))
    sync = eng.add(0, Task("a2a.host_sync", "host", 0.25, deps=(notify,), host_sync=True))
    d = eng.add(0, Task("moe.dispatch", "comm", 1.0, deps=(sync,)))
    eng.add(0, Task("expert", "compute", 1.0, deps=(d,)))
    assert eng.run() == 2.75
    assert eng.timeline(0) == [("notify", 0.0, 0.5), ("shared", 0.0, 0.25), ("a2a.host_sync", 0.5, 0.75),
                               ("moe.dispatch", 0.75, 1.75), ("expert", 1.75, 2.75)]


def _fb_pair(a: float, c: float = 2.0, sms: int = 0) -> Engine:
    """DeepSeek's F&B pair of one layer each, in its issue order: combine(B) | attn(F) | mlp(B) | dispatch(F),
    dispatch(B) | mlp(F) | attn(B) | combine(F); compute phases ``c`` s, all-to-alls ``a`` s."""
    eng = Engine(num_sms=100)
    cb = eng.add(0, Task("combine(B)", "comm", a, sms=sms))
    af = eng.add(0, Task("attn(F)", "compute", c))
    mb = eng.add(0, Task("mlp(B)", "compute", c, deps=(cb,)))
    df = eng.add(0, Task("dispatch(F)", "comm", a, deps=(af,), sms=sms))
    db = eng.add(0, Task("dispatch(B)", "comm", a, deps=(mb,), sms=sms))
    mf = eng.add(0, Task("mlp(F)", "compute", c, deps=(df,)))
    eng.add(0, Task("attn(B)", "compute", c, deps=(db,)))
    eng.add(0, Task("combine(F)", "comm", a, deps=(mf,), sms=sms))
    return eng


def test_fb_pair_hides_each_all_to_all_behind_the_other_chunks_compute():
    """a = 1 <= c = 2: after the first combine(B) (under attn(F)) every all-to-all runs under the other
    microbatch's compute: the span is the compute alone, 4c = 8 (closed form), nothing exposed."""
    eng = _fb_pair(1.0)
    assert eng.run() == 8.0
    assert eng.timeline(0) == [("combine(B)", 0.0, 1.0), ("attn(F)", 0.0, 2.0), ("mlp(B)", 2.0, 4.0),
                               ("dispatch(F)", 2.0, 3.0), ("dispatch(B)", 4.0, 5.0), ("mlp(F)", 4.0, 6.0),
                               ("attn(B)", 6.0, 8.0), ("combine(F)", 6.0, 7.0)]


def test_fb_pair_comm_bound_is_the_all_to_all_sum():
    """a = 3 > c = 2: the comm stream never idles after its start: span = 4a = 12 (closed form)."""
    eng = _fb_pair(3.0)
    assert eng.run() == 12.0
    assert ("attn(B)", 9.0, 11.0) in eng.timeline(0)


def test_fb_pair_sm_sharing_slows_the_overlapped_compute():
    """The same hidden pair with the all-to-alls holding 20 of 100 SMs: each compute phase runs its first second
    (under an all-to-all) at 0.8: attn(F) [0, 2.2), mlp(B) [2.2, 4.4), mlp(F) [4.4, 6.6), attn(B) [6.6, 8.8):
    each of the 4 all-to-alls costs 0.2 s of compute, span 8 + 4 x 0.2 = 8.8 (closed form)."""
    eng = _fb_pair(1.0, sms=20)
    assert eng.run() == pytest.approx(8.8)
    assert eng.timeline(0)[-2] == ("attn(B)", pytest.approx(6.6), pytest.approx(8.8))
    off = _fb_pair(1.0, sms=20)
    off.sm_sharing = False
    assert off.run() == 8.0


def test_host_issue_bounds_a_run_by_the_time_to_issue_it():
    """A run of kernels taking 2 s on the GPU whose launches take the host 10 s ends when its last kernel is
    issued: it starts 10 - 2 = 8 s after the host reaches it (the GPU's wait logged as host.issue)."""
    eng = Engine(num_sms=10)
    eng.add(0, Task("run", "compute", 2.0, issue_s=10.0))
    assert eng.run() == 10.0
    assert eng.timeline(0) == [("host.issue", 0.0, 8.0), ("run", 8.0, 10.0)]


def test_a_blocking_sync_puts_host_and_gpu_in_series():
    """A GPU-heavy run (GPU 5, host 1), a blocking sync, a host-heavy run (GPU 1, host 5): the host cannot issue the
    second run before the sync ends at 5, so the step takes 5 + 5 = 10, not max(6, 6) = 6 (closed form)."""
    eng = Engine(num_sms=10)
    a = eng.add(0, Task("A", "compute", 5.0, issue_s=1.0))
    s = eng.add(0, Task("sync", "compute", 0.0, deps=(a,), host_sync=True))
    eng.add(0, Task("B", "compute", 1.0, deps=(s,), issue_s=5.0))
    assert eng.run() == 10.0
    assert eng.timeline(0) == [("A", 0.0, 5.0), ("sync", 5.0, 5.0), ("host.issue", 5.0, 9.0), ("B", 9.0, 10.0)]
    # without the sync the host runs ahead: the GPU waits only for B's issue to catch up (host 6, GPU 6)
    free = Engine(num_sms=10)
    a = free.add(0, Task("A", "compute", 5.0, issue_s=1.0))
    free.add(0, Task("B", "compute", 1.0, deps=(a,), issue_s=5.0))
    assert free.run() == 6.0


def test_tasks_without_issue_time_keep_the_engine_as_before():
    eng = Engine(num_sms=100)
    a = eng.add(0, Task("gemm", "compute", 1.0))
    eng.add(0, Task("a2a", "comm", 2.0, deps=(a,)))
    assert eng.run() == 3.0
    assert all(name != "host.issue" for name, *_ in eng.timeline(0))
    with pytest.raises(ValueError, match="issue_s"):
        eng.add(0, Task("bad", "compute", 1.0, issue_s=-1.0))
