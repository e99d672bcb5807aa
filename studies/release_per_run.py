"""Each run's own release scalar: the value of ``release.<profile>`` that makes one run exact, every other joint
parameter at the shipped fit. Issue 27's diagnostic of what a release scalar absorbs: if the mechanisms were right,
the runs of one release would agree on it (on every GPU class, model and scale); their spread is what the one
jointly fitted scalar averages over.

    python -m studies.release_per_run                       # TorchTitan's fitted and held-out runs
    python -m studies.release_per_run --release megatron-26.04
    python -m studies.release_per_run --spared              # with sim.joint's spared-kernels switch on
    python -m studies.release_per_run --pair titan-dsv3-b200-mxfp8-deepep titan-dsv3-b200-bf16-deepep

``--pair A B`` reads the scalar off two runs of one release that differ in their kernels alone (the same plan and
all-to-all, another precision): the value at which the predicted step difference equals the measured one, where
what the model lacks, if it is the same in both steps, cancels. Every run of the release is then given at that
scalar (the held-out files' runs too): its measured step, its predicted step and the seconds the prediction lacks, a
step and per MoE layer pass of one microbatch (:func:`moe_layer_microbatches`): a time that is the same per layer
on every GPU and model points at the host, not at the kernels.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scipy.optimize import brentq

from sim.errors import MoesimError
from sim.joint import shipped_values, spec
from sim.predict import predict
from sim.stacks import load_stack, profile_for
from studies.dataset import MeasuredRun, load_runs, resolve_run
from studies.heldout import HELDOUT_MODELS, HELDOUT_RUNS, HELDOUT_TORCHTITAN

__all__ = ["RunScalar", "HELDOUT_FILES", "per_run_scalar", "release_scalars", "pair_scalar", "step_seconds",
           "moe_layer_microbatches", "lacks", "main"]

#: the held-out files whose runs of a release are listed beside its fitted ones
HELDOUT_FILES: tuple[Path, ...] = (HELDOUT_TORCHTITAN, HELDOUT_RUNS, HELDOUT_MODELS)

@dataclass(frozen=True)
class RunScalar:
    """One run's own release scalar (None where no scalar in the bracket makes the run exact)."""

    run: str
    gpu: str
    gpus: int
    held_out: bool
    scalar: float | None


def per_run_scalar(run: MeasuredRun, values: Mapping[str, float]) -> float | None:
    """The ``release.<profile>`` value at which ``run``'s predicted tokens/s equals its measured one, the other
    joint ``values`` held (None: none in the parameter's bounds)."""
    profile = profile_for(run.stack, run.release)
    key = f"release.{profile}"
    if key not in values:
        raise MoesimError(f"run {run.id!r}: no joint parameter {key!r} (a release the fit does not cover)")
    model, cluster, plan = resolve_run(run)
    stack = load_stack(profile)

    def log_error(scalar: float) -> float:
        pred = predict(model, cluster, plan, stack=stack, params=dict(values, **{key: scalar}))
        return math.log(pred.tokens_per_s_per_gpu / run.measured_tokens_per_s_per_gpu)

    lo, hi = spec(key).lower, spec(key).upper  # the joint parameter's own bounds
    f_lo, f_hi = log_error(lo), log_error(hi)
    if f_lo * f_hi > 0:
        return None
    return float(brentq(log_error, lo, hi, xtol=1e-4))


def step_seconds(run: MeasuredRun, values: Mapping[str, float]) -> tuple[float, float]:
    """``run``'s (measured, predicted) step in seconds under the joint ``values``."""
    model, cluster, plan = resolve_run(run)
    pred = predict(model, cluster, plan, stack=load_stack(profile_for(run.stack, run.release)), params=values)
    return plan.tokens_per_step / cluster.n_gpus / run.measured_tokens_per_s_per_gpu, pred.step_time_s


def moe_layer_microbatches(run: MeasuredRun) -> float:
    """MoE layer passes of one microbatch a rank runs in a step (its MoE layers over the pipeline's ranks, times
    its microbatches): the unit in which a time a step lacks is read per layer (a host's issue of each MoE layer, a
    per-layer sync) rather than per step or per FLOP."""
    model, _cluster, plan = resolve_run(run)
    return model.n_moe_layers / plan.pp * plan.n_microbatches


def lacks(run: MeasuredRun, values: Mapping[str, float]) -> tuple[float, float, float | None]:
    """``run``'s measured and predicted step under ``values`` and the milliseconds the prediction lacks per MoE layer
    pass of one microbatch (:func:`moe_layer_microbatches`; None for a model without MoE layers)."""
    measured, predicted = step_seconds(run, values)
    passes = moe_layer_microbatches(run)
    return measured, predicted, 1e3 * (measured - predicted) / passes if passes > 0 else None


def pair_scalar(a: MeasuredRun, b: MeasuredRun, values: Mapping[str, float]) -> float | None:
    """The ``release.<profile>`` value at which ``a``'s predicted step less ``b``'s equals the measured difference
    (two runs of one release; None: none in the parameter's bounds)."""
    key = f"release.{profile_for(a.stack, a.release)}"
    if key != f"release.{profile_for(b.stack, b.release)}" or key not in values:
        raise MoesimError(f"runs {a.id!r} and {b.id!r}: not two runs of one release the joint fit covers")

    def gap(scalar: float) -> float:
        trial = dict(values, **{key: scalar})
        (ma, pa), (mb, pb) = step_seconds(a, trial), step_seconds(b, trial)
        return (pa - pb) - (ma - mb)

    lo, hi = spec(key).lower, spec(key).upper
    g_lo, g_hi = gap(lo), gap(hi)
    if g_lo * g_hi > 0:
        return None
    return float(brentq(gap, lo, hi, xtol=1e-4))


def release_scalars(release: str, values: Mapping[str, float] | None = None,
                    heldout: Sequence[Path] = HELDOUT_FILES) -> list[RunScalar]:
    """Every measured run of profile ``release`` (the shipped dataset, then the held-out files) with its own scalar."""
    vals = dict(shipped_values() if values is None else values)
    fitted = [(r, False) for r in load_runs() if profile_for(r.stack, r.release) == release]
    held = [(r, True) for path in heldout for r in load_runs(path) if profile_for(r.stack, r.release) == release]
    return [RunScalar(r.id, r.gpu, r.gpus, h, per_run_scalar(r, vals)) for r, h in fitted + held]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.release_per_run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", default="torchtitan", help="a release profile the joint fit covers "
                        "(default: torchtitan)")
    parser.add_argument("--spared", action="store_true", help="with the release scalar sparing the microbenchmarked "
                        "library kernels (sim.joint.BENCHMARKED_CLASSES)")
    parser.add_argument("--pair", nargs=2, metavar=("A", "B"), help="two runs of one release differing in their "
                        "kernels alone: the scalar their step difference implies, and every run of the release at it")
    args = parser.parse_args(argv)
    values = dict(shipped_values())
    if args.spared:
        values["release.spares_benchmarked"] = 1.0
    if args.pair:
        return _pair_main(args.pair, values)
    if f"release.{args.release}" not in values:
        known = ", ".join(sorted(n.removeprefix("release.") for n in values if n.startswith("release.")))
        print(f"error: --release {args.release!r} is not a release the joint fit covers (known: {known})")
        return 2
    try:
        rows = release_scalars(args.release, values)
    except MoesimError as err:
        print(f"error: {err}")
        return 2
    fitted = values[f"release.{args.release}"]
    print(f"| run | GPU | GPUs | held out | own scalar | over the joint {fitted:.3f} |")
    print("|---|---|---:|---|---:|---:|")
    for r in rows:
        own = "-" if r.scalar is None else f"{r.scalar:.3f}"
        ratio = "-" if r.scalar is None else f"{r.scalar / fitted:.2f}x"
        print(f"| {r.run} | {r.gpu} | {r.gpus} | {'yes' if r.held_out else 'no'} | {own} | {ratio} |")
    return 0


def _pair_main(ids: Sequence[str], values: dict[str, float]) -> int:
    runs = {r.id: r for r in load_runs()}
    missing = [i for i in ids if i not in runs]
    if missing:
        print(f"error: --pair: no run {missing[0]!r} in the shipped dataset")
        return 2
    if ids[0] == ids[1]:
        print(f"error: --pair: two different runs, got {ids[0]!r} twice")
        return 2
    a, b = runs[ids[0]], runs[ids[1]]
    try:
        scalar = pair_scalar(a, b, values)
    except MoesimError as err:
        print(f"error: --pair: {err}")
        return 2
    release = profile_for(a.stack, a.release)
    key = f"release.{release}"
    if scalar is None:
        print(f"no {key} in [{spec(key).lower}, {spec(key).upper}] gives the step difference of {a.id} and {b.id}")
        return 1
    print(f"{key} from the step difference of {a.id} and {b.id}: {scalar:.3f} (joint fit: {values[key]:.3f})")
    print("| run | held out | measured step s | predicted step s | lacks s | lacks ms per MoE layer-microbatch |")
    print("|---|---|---:|---:|---:|---:|")
    at = dict(values, **{key: scalar})
    held = [r for path in HELDOUT_FILES for r in load_runs(path)]
    for r, held_out in [(r, False) for r in runs.values()] + [(r, True) for r in held]:
        if profile_for(r.stack, r.release) == release:
            measured, predicted, ms = lacks(r, at)
            per_layer = "-" if ms is None else f"{ms:+.1f}"
            print(f"| {r.id} | {'yes' if held_out else 'no'} | {measured:.2f} | {predicted:.2f} | "
                  f"{measured - predicted:+.2f} | {per_layer} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
