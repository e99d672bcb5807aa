"""``moesim plan --model M --tokens T --days D [--gpu G] [--stack S] [--global-batch N] [--gpus-range MIN:MAX]
[--headroom-gib H] [--headroom-pct P] [--price P] [--json]``: the smallest cluster and best plan.

For each GPU type (``--gpu``, repeatable; default the six current ones) the smallest GPU count in whole HGX
nodes or NVL72 racks (:mod:`studies.plan`: doubling, then bisection) whose fastest plan that fits trains
``M`` on ``T`` tokens within ``D`` days; the smallest over the types wins (ties: cheaper with ``--price``,
then faster). Prints its assumptions first (stack, precision, all-to-all backend, global batch policy,
memory headroom), a progress bar on stderr while it searches, then the throughput, interval, memory,
GPU-hours (racks and idle GPUs on NVL72), the runner-up plans, and every count it tried. A schedule,
backend or precision the stack cannot run is refused (exit 2, one line); bad input exits 2 with one message; when no
count of the range trains it, the command says so on stdout (the counts it tried and why the smaller ones were not)
and exits 1.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING, Any

from moesim.argtypes import non_empty, worker_count
from sim.comm.costs import DEEPEP_API_BACKENDS
from sim.errors import ConfigError, MoesimError
from sim.specs import EP_BACKENDS

if TYPE_CHECKING:
    from sim.stacks import StackProfile

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


def _positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) <= 0 or int(text) > 1 << 24:
        raise argparse.ArgumentTypeError(f"must be a positive integer up to {1 << 24}, got {text!r}")
    return int(text)


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and 0 <= value <= 1e4):
        raise argparse.ArgumentTypeError(f"must be a finite number in [0, 10000], got {text}")
    return value


def assumptions(args: argparse.Namespace) -> list[str]:
    """The choices the answer depends on, one line each (printed before the answer)."""
    from studies.plan import GLOBAL_BATCH_POLICY

    lines = [f"stack: {args.stack} (another stack can change the answer: --stack)",
             f"precision: {args.precision or 'mxfp8 where the GPU (B200, B300, GB200, GB300) and the stack run it, else bf16'}",
             f"all-to-all backend: {args.ep_backend}",
             f"global batch: {f'{args.global_batch} sequences per step' if args.global_batch else GLOBAL_BATCH_POLICY}",
             f"memory headroom: peak x {1 + _headroom_fraction(args):.3f} (allocator overhead, --headroom-pct) "
             f"+ {args.headroom_gib:g} GiB left free per GPU (--headroom-gib)"]
    profile = _readable_stack(args.stack)
    if profile is not None and args.ep_backend in DEEPEP_API_BACKENDS and not profile.deepep_tp_token_split:
        lines.append("DeepEP with TP > 1: every TP rank dispatches, and its experts compute, every token of the "
                     "microbatch, as this stack's release does (deepep_tp_token_split = false): such plans carry "
                     "twice the routed-expert work")
    if profile is not None:
        from sim.joint import covers, joint_fit_record, shipped_values

        rec = joint_fit_record().get("params", {}).get("step.fixed_s", {})
        if covers(profile, shipped_values()) and rec.get("value"):
            lines.append(f"step boundary: {rec['value']:.2f} s (+- {rec.get('sigma') or 0:.2f}) each step that "
                         "accumulates two or more microbatches per rank spends once, whatever its data-parallel size "
                         "(joint step.fixed_s, StackProfile.step_boundary_s; it weighs most on short steps: many GPUs "
                         "for a small global batch; a step of one microbatch pays none)")
    if profile is not None and profile.document_mask:
        lines.append("attention: masked at document boundaries, documents of C4's lengths (this stack's "
                     "FlexAttention block_causal mask; sim.documents); longer documents cost more attention")
    return lines


def _readable_stack(stack: str) -> StackProfile | None:
    """``stack``'s profile, or None when it cannot be read (the command reports a bad stack itself)."""
    from sim.stacks import load_stack

    try:
        return load_stack(stack)
    except ConfigError:
        return None


def _headroom_fraction(args: argparse.Namespace) -> float:
    from studies.plan import ALLOCATOR_OVERHEAD

    pct = getattr(args, "headroom_pct", None)
    return ALLOCATOR_OVERHEAD if pct is None else pct / 100


def _gpus_range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition(":")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected MIN:MAX GPU counts (e.g. 512:4096), got {text!r}")
    lo, hi = int(low), int(high)
    if not 1 <= lo <= hi <= 65536:
        raise argparse.ArgumentTypeError(f"must satisfy 1 <= MIN <= MAX <= 65536, got {text!r}")
    return lo, hi


def _progress_bar(disabled: bool) -> Any:
    """A rich progress bar on stderr and the callback that drives it (a no-op when ``disabled``)."""
    import contextlib

    if disabled:
        return contextlib.nullcontext(), None
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn(), console=Console(stderr=True), transient=True)
    task = bar.add_task("searching", total=None)

    def update(gpu: str, n: int, done: int, total: int) -> None:
        bar.update(task, completed=done, total=total, description=f"searching {n} x {gpu}" if gpu else "done")

    return bar, update


def add_plan(subparsers: Any) -> None:
    """Register ``moesim plan`` on ``subparsers``."""
    p = subparsers.add_parser("plan", help="the smallest cluster and best plan for T tokens in D days",
                              description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="catalog model name or model file")
    p.add_argument("--tokens", type=_positive, required=True, help="tokens to train (e.g. 14.8e12)")
    p.add_argument("--days", type=_positive, required=True, help="wall-clock days available")
    p.add_argument("--gpu", type=non_empty, action="append", help=f"GPU type (repeatable; default {' '.join(GPUS)})")
    p.add_argument("--price", type=_positive, help="USD per GPU-hour (adds the cost)")
    p.add_argument("--precision", help="default: mxfp8 where the GPU runs it, else bf16")
    p.add_argument("--ep-backend", default="deepep", dest="ep_backend")
    p.add_argument("--stack", default="torchtitan", help="framework stack profile (default torchtitan)")
    p.add_argument("--global-batch", type=_positive_int, dest="global_batch",
                   help="sequences per step at every count (default: max(4096, 2 x GPUs))")
    p.add_argument("--headroom-gib", type=_non_negative, default=0.0, dest="headroom_gib",
                   help="GiB of HBM every plan must leave free (default 0)")
    p.add_argument("--headroom-pct", type=_non_negative, default=None, dest="headroom_pct",
                   help="%% of its predicted peak a plan must leave free for the allocator (default 8.6: TorchTitan's "
                        "logged reserved peaks over the predicted tensors)")
    p.add_argument("--gpus-range", type=_gpus_range, default=None, dest="gpus_range", metavar="MIN:MAX",
                   help="least and most GPUs to consider (default 1:65536)")
    p.add_argument("--no-progress", action="store_true", dest="no_progress", help="no progress bar on stderr")
    p.add_argument("--workers", type=worker_count, default=None, help="processes for the plan search (default: every core)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run_plan)


def _plan_text(c: Any, stack: str = "torchtitan") -> str:
    from studies._sim import stack_profile

    p = c.plan
    vpp = f" vpp {p.vpp}" if p.pp_schedule == "interleaved-1f1b" else ""
    shard = "ZeRO-1" if stack_profile(stack).param_sharding == "zero1" else "FSDP"
    return (f"TP {p.tp} PP {p.pp} {p.pp_schedule}{vpp} EP {p.ep} {shard} {p.dp_shard} recompute {p.ac} "
            f"micro-batch {p.micro_batch} ({p.global_batch} x {p.seq_len} tokens/step)")


def run_plan(args: argparse.Namespace) -> int:
    import os

    from sim.limits import max_workers
    from studies._sim import INTERVAL_NOTE
    from studies.plan import smallest_cluster

    try:
        if args.ep_backend not in EP_BACKENDS:
            raise ConfigError(f"--ep-backend must be one of {', '.join(EP_BACKENDS)}; got {args.ep_backend!r}")
        from studies._sim import stack_profile

        stack_profile(args.stack)  # an unknown stack is a one-line error before the search
        bar, update = _progress_bar(args.json or getattr(args, "no_progress", False))
        with bar:
            answer = smallest_cluster(args.model, tokens=args.tokens, days=args.days, gpus=args.gpu or GPUS,
                                      precision=args.precision, ep_backend=args.ep_backend, stack=args.stack,
                                      price=args.price, workers=args.workers or min(os.cpu_count() or 1, max_workers()),
                                      global_batch=getattr(args, "global_batch", None),
                                      headroom_gib=getattr(args, "headroom_gib", 0.0),
                                      headroom_fraction=_headroom_fraction(args),
                                      gpus_range=getattr(args, "gpus_range", None), progress=update)
    except MoesimError as err:
        print(f"moesim plan: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"model": answer.model, "tokens": answer.tokens, "days": answer.days,
                          "best": answer.best.as_dict() if answer.best else None,
                          "per_gpu": {g: (o.as_dict() if o else None) for g, o in answer.per_gpu.items()},
                          "counts_ruled_out": answer.skipped, "counts_too_small": answer.too_small,
                          "counts_tried": {g: [t.as_dict() for t in ts] for g, ts in answer.tried.items()},
                          "count_unit": answer.unit, "gpus_per_rack": answer.rack,
                          "assumptions": assumptions(args), "elapsed_s": answer.elapsed_s,
                          "gpu_hours": (answer.best.days * 24 * answer.best.n_gpus) if answer.best else None,
                          "notes": [INTERVAL_NOTE]}, indent=2, allow_nan=False))
        return 0 if answer.best else 1
    print("assumptions:")
    for line in assumptions(args):
        print(f"  {line}")
    if answer.best is None:
        low, high = getattr(args, "gpus_range", None) or (1, 65536)
        print(f"no cluster of {low:,} to {high:,} GPUs of {', '.join(answer.per_gpu)} trains {answer.model} on "
              f"{answer.tokens:.3g} tokens in {answer.days:g} days with a plan that fits")
        for gpu, tried in answer.tried.items():
            shown = ", ".join(f"{t.n_gpus} ({t.outcome})" for t in tried)
            print(f"  counts tried ({gpu}, {answer.unit_text(gpu)}): {shown or 'none'}; not searched: "
                  f"{answer.too_small.get(gpu, '')}")
        return 1
    o = answer.best
    p = o.best.prediction
    print(f"{answer.model}: {answer.tokens:.3g} tokens in {answer.days:g} days")
    racks = (f" ({o.racks} NVL72 rack{'s' if o.racks != 1 else ''}, {o.idle_gpus} GPUs idle)" if o.racks
             else f" ({o.n_gpus // answer.unit.get(o.gpu, 8)} nodes)")
    print(f"smallest cluster: {o.n_gpus} x {o.gpu}{racks}  ->  {o.days:.1f} days, "
          f"{o.days * 24 * o.n_gpus:,.0f} GPU-hours" + (f", ${o.cost_usd:,.0f}" if o.cost_usd is not None else ""))
    print(f"  plan: {_plan_text(o.best, args.stack)}")
    ival = f"{o.interval[0]:.0f}-{o.interval[1]:.0f}" if o.interval else "none: sim.uncertainty is not in this build"
    print(f"  {p.tokens_per_s_per_gpu:.1f} tokens/s per GPU (interval {ival}), step {p.step_time_s:.2f} s, "
          f"MFU {p.mfu * 100:.1f}%, memory {p.peak_memory_bytes / 2**30:.1f} of {p.memory_capacity_bytes / 2**30:.0f} GiB")
    if o.days_interval is not None:
        fast, slow = o.days_interval
        past = (f": past the {answer.days:g}-day target at the slow end; size for it with a shorter --days"
                if slow > answer.days else "")
        print(f"  days over the interval: {fast:.1f}-{slow:.1f} (p90-p10 tokens/s){past}")
    for i, c in enumerate(o.runner_ups, 2):
        print(f"  runner-up #{i}: {_plan_text(c, args.stack)}: {c.prediction.tokens_per_s_per_gpu:.1f} tok/s/GPU, "
              f"{c.prediction.peak_memory_bytes / 2**30:.1f} GiB")
    for gpu, other in answer.per_gpu.items():
        if other is not None and other is not o:
            rack_note = f" ({other.racks} racks, {other.idle_gpus} idle)" if other.racks else ""
            print(f"  {gpu}: {other.n_gpus} GPUs{rack_note}, {other.days:.1f} days")
        elif other is None:
            print(f"  {gpu}: no count tried meets the target")
    print(f"  searched in {answer.elapsed_s:.1f} s: {o.searched['evaluated']} plans predicted, {o.searched['pruned']} "
          f"pruned by a lower bound at {o.n_gpus} GPUs")
    for gpu, tried in answer.tried.items():
        shown = ", ".join(f"{t.n_gpus} ({t.outcome}{f', {t.days:.1f} days' if t.days is not None else ''})"
                          for t in tried)
        print(f"  counts tried ({gpu}, {answer.unit_text(gpu)}; doubling, then bisection): {shown or 'none'}")
    if answer.too_small.get(o.gpu):
        print(f"  not searched ({o.gpu}): {answer.too_small[o.gpu]}")
    return 0
