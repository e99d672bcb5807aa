"""Speed and memory of the simulator (a script, not a timed test).

Targets on a 2-core machine (issue 7, Must show 5): the seed scenario's four-variant ``moesim predict``
under 2 s wall including start-up; one 256-GPU prediction with overlap (Megatron combined 1F1B, DeepEP)
under 0.2 s in-process; 2,048 GPUs under 2 s; 16,384 GPUs under 5 s; peak memory under 1 GB. Run: ``python benchmarks/bench_sim.py``.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _cli_seed() -> float:
    env = dict(os.environ, PYTHONPATH=ROOT)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "moesim", "predict"], check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    from sim.catalog import load_cluster, load_model
    from sim.predict import predict
    from sim.specs import ParallelPlan
    from sim.stacks import StackProfile

    rows = [("seed scenario, 4 variants, `moesim predict` wall incl. start-up", _cli_seed(), 2.0)]
    model = load_model("deepseek-v3-671b")
    overlap = StackProfile(name="overlap", ep_overlap_available=True)
    cases = [
        (256, ParallelPlan(tp=2, pp=2, pp_schedule="interleaved-1f1b", vpp=2, ep=32, dp_shard=64, seq_len=8192,
                           global_batch=4096), 0.3),
        (256, ParallelPlan(tp=2, pp=2, pp_schedule="interleaved-1f1b", vpp=2, ep=32, dp_shard=64, seq_len=8192,
                           global_batch=4096, ac="selective", ep_backend="deepep", ep_overlap=True), 0.2),
        (2048, ParallelPlan(tp=2, pp=4, pp_schedule="interleaved-1f1b", vpp=2, ep=64, dp_shard=256,
                            seq_len=8192, global_batch=8192, ep_backend="deepep"), 2.0),
        (16384, ParallelPlan(tp=2, pp=8, pp_schedule="interleaved-1f1b", vpp=2, ep=64, dp_shard=512,
                             dp_replicate=2, seq_len=8192, global_batch=16384, ep_backend="deepep"), 5.0),
        (16384, ParallelPlan(tp=1, pp=8, pp_schedule="dualpipev", ep=64, dp_shard=2048, seq_len=4096,
                             global_batch=32768, ep_backend="deepep", routing="zipf:0.5"), 5.0),
    ]
    for n, plan, target in cases:
        cluster = load_cluster("hgx-b200", n_gpus=n)
        t = time.perf_counter()
        p = predict(model, cluster, plan, stack=overlap)
        dt = time.perf_counter() - t
        label = (f"{n} GPUs, {plan.pp_schedule}, {plan.ep_backend}, routing {plan.routing}"
                 f"{', ep_overlap' if plan.ep_overlap else ''} (in-process, first call)")
        rows.append((label, dt, target))
        assert p.step_time_s > 0
    scaling = _symmetric_scaling(model)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'case':<86} {'seconds':>8} {'target':>7}")
    for label, dt, target in rows:
        print(f"{label:<86} {dt:>8.3f} {target:>7.1f} {'ok' if dt < target else 'SLOW'}")
    print(f"peak RSS {peak_mb:.0f} MB (target < 1024 MB) {'ok' if peak_mb < 1024 else 'HIGH'}")
    print("symmetric scaling (same TP2 PP2 EP32 plan, data parallel grown; fresh caches each):")
    base = scaling[0][1]
    for n, dt in scaling:
        print(f"  {n:>6} GPUs {dt:8.3f} s  ({dt / base:5.2f}x the 256-GPU time for {n // 256}x the GPUs)")


def _symmetric_scaling(model) -> list[tuple[int, float]]:  # type: ignore[no-untyped-def]
    """Time of the same plan shape at growing data-parallel width: must stay flat, not grow with N."""
    from sim import comm
    from sim.catalog import load_cluster
    from sim.predict import predict
    from sim.specs import ParallelPlan

    out = []
    for n in (256, 2048, 16384):
        dp = n // 4
        plan = ParallelPlan(tp=2, pp=2, pp_schedule="interleaved-1f1b", vpp=2, ep=32, dp_shard=dp,
                            seq_len=8192, global_batch=dp * 16)
        comm.clear_caches()
        t = time.perf_counter()
        predict(model, load_cluster("hgx-b200", n_gpus=n), plan)
        out.append((n, time.perf_counter() - t))
    return out


if __name__ == "__main__":
    main()
