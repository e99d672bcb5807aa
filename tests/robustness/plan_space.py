"""Random ``moesim predict`` command lines over the space of plans a user may ask for.

Used by ``tests/robustness/test_random_plans.py`` (hypothesis, fixed seed, in CI) and
``benchmarks/random_plans.py`` (1,000+ plans, each run under two ``PYTHONHASHSEED`` values).

A drawn command line is *plausible*: its degrees multiply to the GPU count and every flag holds a value of
its type, but the loaders may still refuse it (an EP degree that does not divide the experts, layers that do
not split over the stages, a plan that does not fit). The contract checked on every one: exit 0 with a
prediction, or exit 2 with one line naming why; never a traceback, an internal error (exit 70) or a hang.
"""

from __future__ import annotations

import random

__all__ = ["MODELS", "CLUSTERS", "random_argv"]

MODELS = ("debug", "deepseek-v3-16b", "qwen3-30b-a3b", "mixtral-8x22b", "deepseek-v2-236b", "qwen3-235b-a22b",
          "deepseek-v3-671b", "kimi-k2")
CLUSTERS = ("hgx-h100", "hgx-h200", "h800-deepseek", "hgx-b200", "hgx-b200-800g", "hgx-b300", "gb200-nvl72",
            "gb300-nvl72")
_GPU_OVERRIDES = ("h100", "h200", "b200", "b300", "gb200", "gb300")
_SCHEDULES = ("1f1b", "interleaved-1f1b", "dualpipe", "dualpipev")
_PRECISIONS = ("bf16", "mxfp8-grouped", "mxfp8", "fp8-blockwise", "fp8-current")
_BACKENDS = ("nccl", "deepep", "deepep-ll", "hybridep")
_ROUTINGS = ("balanced", "round-robin", "zipf:0.8", "zipf:1.2", "dirichlet:2.0", "dirichlet:0.5")
_STACKS = ("torchtitan", "megatron", "deepseek")


def random_argv(rng: random.Random, max_gpus: int = 256) -> list[str]:
    """One plausible ``predict`` argv (without the leading ``predict`` and with ``--json``), drawn from ``rng``."""
    model = rng.choice(MODELS)
    cluster = rng.choice(CLUSTERS)
    tp = rng.choice((1, 1, 2, 4, 8))
    pp = rng.choice((1, 1, 2, 4, 8))
    cp = rng.choice((1, 1, 1, 2))
    dp_replicate = rng.choice((1, 1, 2))
    dp_shard = rng.choice((1, 2, 4, 8))
    while tp * pp * cp * dp_replicate * dp_shard > max_gpus:  # shrink the widest degree first
        if dp_shard > 1:
            dp_shard //= 2
        elif pp > 1:
            pp //= 2
        else:
            tp //= 2
    gpus = tp * pp * cp * dp_replicate * dp_shard
    ep = rng.choice([d for d in (1, 2, 4, 8, 16, 32, 64) if (dp_shard * cp * tp) % d == 0])
    schedule = rng.choice(_SCHEDULES) if pp > 1 else "1f1b"
    micro = rng.choice((1, 1, 2))
    dp = dp_shard * dp_replicate
    n_micro = rng.choice((1, 2, 4, 8, 16)) * (2 * pp if schedule in ("dualpipe", "dualpipev") else pp)
    argv = ["--model", model, "--cluster", cluster, "--gpus", str(gpus), "--tp", str(tp), "--pp", str(pp),
            "--ep", str(ep), "--cp", str(cp), "--dp-shard", str(dp_shard), "--dp-replicate", str(dp_replicate),
            "--pp-schedule", schedule, "--seq-len", str(rng.choice((1024, 2048, 4096))),
            "--micro-batch", str(micro), "--global-batch", str(dp * micro * n_micro),
            "--ac", rng.choice(("none", "selective", "full")), "--precision", rng.choice(_PRECISIONS),
            "--ep-backend", rng.choice(_BACKENDS), "--routing", rng.choice(_ROUTINGS),
            "--routing-seed", str(rng.randrange(4))]
    if schedule == "interleaved-1f1b":
        argv += ["--vpp", str(rng.choice((2, 3, 4)))]
    if rng.random() < 0.3:
        argv += ["--gpu", rng.choice(_GPU_OVERRIDES)]
    if rng.random() < 0.3:
        argv += ["--deepep-sms", str(rng.choice((8, 20, 24, 32, 64)))]
    if rng.random() < 0.3:
        argv += ["--stack", rng.choice(_STACKS)]
    if rng.random() < 0.15:
        argv += ["--ep-overlap"]
    if tp > 1 and rng.random() < 0.3:
        argv += ["--etp", str(tp)]
    if rng.random() < 0.2:
        argv += ["--grad-reduce-dtype", rng.choice(("fp32", "bf16"))]
    return [*argv, "--json"]
