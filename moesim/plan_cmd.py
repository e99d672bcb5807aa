"""``moesim plan --model M --tokens T --days D [--gpu G] [--price P] [--json]``: the smallest cluster and best plan.

For each GPU type (``--gpu``, repeatable; default the six current ones) the smallest power-of-two GPU count
whose fastest plan that fits trains ``M`` on ``T`` tokens within ``D`` days; the smallest over the types
wins (ties: cheaper with ``--price``, then faster). Prints its throughput, interval (when the build has
one), memory and the runner-up plans. Bad input exits 2 with one message.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from sim.errors import ConfigError, MoesimError
from sim.specs import EP_BACKENDS

__all__ = ["add_plan", "run_plan"]

GPUS = ["h100", "h200", "b200", "gb200", "b300", "gb300"]


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def add_plan(subparsers: Any) -> None:
    """Register ``moesim plan`` on ``subparsers``."""
    p = subparsers.add_parser("plan", help="the smallest cluster and best plan for T tokens in D days",
                              description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="catalog model name or model file")
    p.add_argument("--tokens", type=_positive, required=True, help="tokens to train (e.g. 14.8e12)")
    p.add_argument("--days", type=_positive, required=True, help="wall-clock days available")
    p.add_argument("--gpu", action="append", help=f"GPU type (repeatable; default {' '.join(GPUS)})")
    p.add_argument("--price", type=_positive, help="USD per GPU-hour (adds the cost)")
    p.add_argument("--precision", help="default: mxfp8 where the GPU runs it, else bf16")
    p.add_argument("--ep-backend", default="deepep", dest="ep_backend")
    p.add_argument("--stack", default="torchtitan")
    p.add_argument("--workers", type=int, default=None, help="processes for the plan search (default: every core)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run_plan)


def _plan_text(c: Any) -> str:
    p = c.plan
    vpp = f" vpp {p.vpp}" if p.pp_schedule == "interleaved-1f1b" else ""
    return (f"TP {p.tp} PP {p.pp} {p.pp_schedule}{vpp} EP {p.ep} FSDP {p.dp_shard} recompute {p.ac} "
            f"micro-batch {p.micro_batch} ({p.global_batch} x {p.seq_len} tokens/step)")


def run_plan(args: argparse.Namespace) -> int:
    import os

    from studies._sim import INTERVAL_NOTE
    from studies.plan import smallest_cluster

    try:
        if args.ep_backend not in EP_BACKENDS:
            raise ConfigError(f"--ep-backend must be one of {', '.join(EP_BACKENDS)}; got {args.ep_backend!r}")
        answer = smallest_cluster(args.model, tokens=args.tokens, days=args.days, gpus=args.gpu or GPUS,
                                  precision=args.precision, ep_backend=args.ep_backend, stack=args.stack,
                                  price=args.price, workers=args.workers or os.cpu_count() or 1)
    except MoesimError as err:
        print(f"moesim plan: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"model": answer.model, "tokens": answer.tokens, "days": answer.days,
                          "best": answer.best.as_dict() if answer.best else None,
                          "per_gpu": {g: (o.as_dict() if o else None) for g, o in answer.per_gpu.items()},
                          "counts_ruled_out": answer.skipped, "elapsed_s": answer.elapsed_s,
                          "notes": [INTERVAL_NOTE]}, indent=2))
        return 0 if answer.best else 1
    if answer.best is None:
        print(f"no cluster of up to 65,536 GPUs of {', '.join(answer.per_gpu)} trains {answer.model} on "
              f"{answer.tokens:.3g} tokens in {answer.days:g} days with a plan that fits")
        return 1
    o = answer.best
    p = o.best.prediction
    print(f"{answer.model}: {answer.tokens:.3g} tokens in {answer.days:g} days")
    print(f"smallest cluster: {o.n_gpus} x {o.gpu}  ->  {o.days:.1f} days"
          + (f", ${o.cost_usd:,.0f}" if o.cost_usd is not None else ""))
    print(f"  plan: {_plan_text(o.best)}")
    ival = f"{o.interval[0]:.0f}-{o.interval[1]:.0f}" if o.interval else "none: sim.uncertainty is not in this build"
    print(f"  {p.tokens_per_s_per_gpu:.1f} tokens/s per GPU (interval {ival}), step {p.step_time_s:.2f} s, "
          f"MFU {p.mfu * 100:.1f}%, memory {p.peak_memory_bytes / 2**30:.1f} of {p.memory_capacity_bytes / 2**30:.0f} GiB")
    for i, c in enumerate(o.runner_ups, 2):
        print(f"  runner-up #{i}: {_plan_text(c)}: {c.prediction.tokens_per_s_per_gpu:.1f} tok/s/GPU, "
              f"{c.prediction.peak_memory_bytes / 2**30:.1f} GiB")
    for gpu, other in answer.per_gpu.items():
        if other is not None and other is not o:
            print(f"  {gpu}: {other.n_gpus} GPUs, {other.days:.1f} days")
        elif other is None:
            print(f"  {gpu}: no count up to 65,536 meets the target")
    print(f"  searched in {answer.elapsed_s:.1f} s: {o.searched['evaluated']} plans predicted, {o.searched['pruned']} "
          f"pruned by a lower bound at {o.n_gpus} GPUs; smaller counts ruled out: {answer.skipped.get(o.gpu)}")
    return 0
