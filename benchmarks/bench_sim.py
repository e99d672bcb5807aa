"""Speed and memory of the simulator (a script, not a timed test): each figure with its target.

Targets on a 2-core machine (issue 28, Must show 8; issue 15 before it): the seed scenario's four-variant
``moesim predict`` under 0.5 s wall including start-up (and it never imports torch); one 256-GPU prediction
with ``--ep-overlap`` (megatron stack, combined 1F1B, DeepEP) under 0.1 s in-process beyond a tiny one;
16,384 GPUs under 2 s and peak RSS under 500 MB; with ``--sweep`` the default capacity sweep (>= 500
points) under 120 s; with ``--plan`` ``moesim plan`` for DeepSeek-V3 671B on B200 under 10 s.

Command wall times are the median of several runs after one warm-up, with Python's default bytecode cache
(``PYTHONDONTWRITEBYTECODE`` removed from the child's environment, as on a user's machine: with it set, every
start compiles the project's modules from source again, about 0.08 s more here).

    python benchmarks/bench_sim.py [--sweep] [--plan]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _wall(cmd: list[str], *, repeat: int = 1) -> float:
    """Wall seconds of ``cmd``: one run, or the median of ``repeat`` runs after a warm-up run."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    times = []
    for _ in range(repeat + (1 if repeat > 1 else 0)):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        times.append(time.perf_counter() - t)
    times = sorted(times[1:] if repeat > 1 else times)
    return times[len(times) // 2]


def _imports_torch() -> bool:
    code = ("import sys, runpy; sys.argv = ['moesim', 'predict']\n"
            "import contextlib, io\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    from moesim.cli import main; main(['predict'])\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
    return out.stdout.strip().endswith("True")


def main() -> None:
    import argparse
    import tempfile

    from sim.catalog import load_cluster, load_model
    from sim.predict import predict
    from sim.specs import ParallelPlan

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="also time the default capacity sweep (minutes)")
    parser.add_argument("--plan", action="store_true", help="also time `moesim plan` for 671B on B200")
    args = parser.parse_args()
    seed = [sys.executable, "-m", "moesim", "predict"]
    rows = [("seed scenario, 4 variants, `moesim predict` wall incl. start-up (median of 5)", _wall(seed, repeat=5), 0.5)]
    tiny_t = time.perf_counter()
    predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8), ParallelPlan(ep=4, dp_shard=8, global_batch=16,
                                                                                  seq_len=512))
    tiny = time.perf_counter() - tiny_t
    model = load_model("deepseek-v3-671b")
    t = time.perf_counter()
    predict(model, load_cluster("hgx-b200", n_gpus=256),
            ParallelPlan(tp=2, pp=2, pp_schedule="interleaved-1f1b", vpp=2, ep=32, dp_shard=64, seq_len=8192,
                         global_batch=4096, ac="selective", ep_backend="deepep", ep_overlap=True), stack="megatron")
    rows.append(("256 GPUs, --ep-overlap, megatron stack, DeepEP (in-process, beyond a tiny prediction)",
                 time.perf_counter() - t - tiny, 0.1))
    for plan in (ParallelPlan(tp=2, pp=8, pp_schedule="interleaved-1f1b", vpp=2, ep=64, dp_shard=512, dp_replicate=2,
                              seq_len=8192, global_batch=16384, ep_backend="deepep"),
                 ParallelPlan(tp=1, pp=8, pp_schedule="dualpipev", ep=64, dp_shard=2048, seq_len=4096,
                              global_batch=32768, ep_backend="deepep", routing="zipf:0.5")):
        t = time.perf_counter()
        predict(model, load_cluster("hgx-b200", n_gpus=16384), plan)
        rows.append((f"16384 GPUs, {plan.pp_schedule}, {plan.ep_backend}, routing {plan.routing} (in-process)",
                     time.perf_counter() - t, 2.0))
    if args.plan:
        rows.append(("`moesim plan --model deepseek-v3-671b --tokens 10e12 --days 30 --gpu b200` wall",
                     _wall([sys.executable, "-m", "moesim", "plan", "--model", "deepseek-v3-671b", "--tokens",
                            "10e12", "--days", "30", "--gpu", "b200"]), 10.0))
    if args.sweep:
        with tempfile.TemporaryDirectory() as out:
            rows.append(("default capacity sweep `moesim study capacity --out DIR` wall",
                         _wall([sys.executable, "-m", "moesim", "study", "capacity", "--out", out]), 120.0))
    scaling = _symmetric_scaling(model)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'case':<96} {'seconds':>8} {'target':>7}")
    for label, dt, target in rows:
        print(f"{label:<96} {dt:>8.3f} {target:>7.1f} {'ok' if dt < target else 'SLOW'}")
    print(f"peak RSS of the in-process predictions {peak_mb:.0f} MB (target < 500 MB) "
          f"{'ok' if peak_mb < 500 else 'HIGH'}")
    torch = _imports_torch()
    print(f"`moesim predict` imports torch: {torch} (target False) {'ok' if not torch else 'BAD'}")
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
