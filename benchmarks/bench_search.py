"""Plan search speed (a script, not a timed test): DeepSeek-V3 671B on 1,024 B200.

Target (issue 9, must show 5): the best plan over TP, PP and schedule, VPP, EP, recompute and
micro-batch in under 60 s on 2 cores, every valid plan predicted or pruned by a proven lower bound.
Prints plans enumerated / invalid / not fitting / predicted / pruned and plans per second.
Run: ``python benchmarks/bench_search.py [--workers N] [--check]`` (``--check`` also predicts every
fitting plan without pruning and asserts the same best plan and runner-ups; slow).
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    from sim.catalog import load_cluster, load_model
    from studies.search import PlanSpace, search

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--check", action="store_true", help="also search without pruning and compare")
    args = parser.parse_args()
    model, cluster = load_model("deepseek-v3-671b"), load_cluster("hgx-b200", n_gpus=args.gpus)
    space = PlanSpace()
    print(f"space: tp {space.tp} pp {space.pp} schedules {space.schedules} vpp {space.vpp} ep (powers of 2) "
          f"ac {space.ac} micro_batch {space.micro_batch}; {space.precision}, {space.ep_backend}, "
          f"seq {space.seq_len}, global batch {space.global_batch}")
    r = search(model, cluster, space, workers=args.workers)
    c = r.counts
    print(f"DeepSeek-V3 671B on {args.gpus} B200, {args.workers} workers: {r.elapsed_s:.1f} s")
    print(f"  plans enumerated {c['enumerated']}  invalid {c['invalid']}  not fitting in memory {c['no_fit']}  "
          f"fitting {c['fits']}")
    print(f"  evaluated (predicted) {c['evaluated']}  pruned by lower bound {c['pruned']}  "
          f"({c['enumerated'] / r.elapsed_s:.0f} plans/s enumerated, {c['evaluated'] / r.elapsed_s:.1f} predictions/s)")
    assert r.best is not None
    for tag, cand in [("best", r.best)] + [(f"#{i + 2}", x) for i, x in enumerate(r.runner_ups)]:
        p = cand.plan
        print(f"  {tag:>5}: tp {p.tp} pp {p.pp} {p.pp_schedule} vpp {p.vpp} ep {p.ep} ac {p.ac} mb {p.micro_batch}: "
              f"{cand.prediction.tokens_per_s_per_gpu:.1f} tok/s/GPU, step {cand.prediction.step_time_s:.2f} s, "
              f"{cand.prediction.peak_memory_bytes / 2**30:.1f} GiB")
    if args.check:
        full = search(model, cluster, space, workers=args.workers, prune=False)
        same = [x.plan for x in [full.best, *full.runner_ups]] == [x.plan for x in [r.best, *r.runner_ups]]
        print(f"  unpruned: {full.counts['evaluated']} predicted in {full.elapsed_s:.1f} s; same top plans: {same}")
        assert same


if __name__ == "__main__":
    main()
