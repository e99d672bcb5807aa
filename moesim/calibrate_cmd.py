"""``moesim calibrate``: profile, fit, show, compare, run.

- ``profile --out DIR [--device cpu|cuda] [--quick]``: microbenchmarks and reference-layer runs (torch, in
  subprocesses) into ``DIR/profile.json``;
- ``fit TRACE_OR_PROFILE... --out FILE [--gpu G] [--step all|N]``: Kineto/Chrome traces (ours, or a real job's
  by kernel-name rules; several ``ProfilerStep#N``: the complete steps averaged, or ``--step``) or a
  ``profile.json`` -> a calibration file;
- ``show FILE``: what a calibration holds, with its provenance and residuals;
- ``compare TRACE [--calibration FILE] [--holdout-layer N] [--sim-trace FILE] [--step all|N] [--json]``:
  measured vs simulated per op and for the traced window;
- ``run --device cpu --out FILE``: profile + fit on this machine.

User errors print one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from moesim.argtypes import non_empty
from sim.errors import ConfigError

__all__ = ["add_calibrate_parser"]


def _same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name one file (hard links and symlinks included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet): compare where they resolve
        return Path(a).resolve() == Path(b).resolve()


def _refuse_same(flag: str, out: str | None, inputs: list[str]) -> None:
    """An output that is one of the inputs would destroy it: refused before anything is read."""
    if out is None or out == "-":
        return
    for given in inputs:
        if given != "-" and _same_file(out, given):
            raise ConfigError(f"{flag} {out} is the input {given}: writing it would overwrite the input; "
                              "choose another output file")


def _cmd_fit(args: argparse.Namespace) -> int:
    from calibrate.document import fit_traces
    from calibrate.microbench import fit_profile, is_profile
    from calibrate.steps import parse_step

    _refuse_same("--out", args.out, args.inputs)
    step = parse_step(args.step)
    if len(args.inputs) == 1 and is_profile(args.inputs[0]):
        doc = fit_profile(args.inputs[0], args.out, name=args.name)
    else:
        doc = fit_traces(args.inputs, args.out, gpu=args.gpu, name=args.name, step=step)
    res = doc.get("residuals", {})
    print(f"calibrate fit: wrote {args.out} ({doc['gpu']}, {len(res)} fitted tables with residuals)")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from sim.calibration import load_calibration

    cal = load_calibration(args.file)
    if args.json:
        print(json.dumps(cal.to_dict(), indent=1, allow_nan=False))
        return 0
    p = cal.provenance
    print(f"calibration {cal.name}  ({cal.path})")
    print(f"  gpu {cal.gpu}; device {p.get('device')}; method: {p.get('method')}")
    print(f"  date {p.get('date')}; git {p.get('git')}; torch {p.get('torch')}; torchao {p.get('torchao')}; "
          f"deep_ep {p.get('deep_ep')}; driver {p.get('driver')}")
    for s in p.get("sources", []):
        print(f"  source: {s}")
    t = cal.tables
    if t.get("kernels"):
        print("  kernels: " + ", ".join(f"{k}={v}" for k, v in t["kernels"].items()))
    for key in ("gemm_eff", "grouped_gemm_eff"):
        for dtype, c in t.get(key, {}).items():
            pts = ", ".join(f"{s:.3g}:{v:.3f}" for s, v in zip(c["sizes"], c["values"]))
            print(f"  {key}.{dtype}: {pts}")
    for key in ("attn_fwd_eff", "attn_bwd_eff", "mem_bw_eff", "quantize_bw_eff", "launch_overhead_s", "host_sync_s"):
        if key in t:
            print(f"  {key}: {t[key]:.4g}")
    for key in ("sm_sharing", "comm", "stack_efficiency"):
        if key in t:
            print(f"  {key}: {json.dumps(t[key])}")
    for kind, row in t.get("comm_rates", {}).items():
        extra = f", notify {row['overhead_s'] * 1e3:.2f} ms" if "overhead_s" in row else ""
        print(f"  comm_rates.{kind}: {row.get('bytes_per_s', 0) / 1e9:.1f} GB/s{extra}")
    if t.get("op_seconds"):
        print(f"  op_seconds: {len(t['op_seconds'])} measured ops without shapes")
    if t.get("residuals"):
        print("  residuals (predicted/measured - 1): table, n, median |err|, p10, p90")
        for key, r in t["residuals"].items():
            if key.startswith("op_seconds."):
                continue
            print(f"    {key:<52} {r.get('n', 0):>4.0f} {r.get('median_abs_rel', 0) * 100:>6.1f}% "
                  f"{r.get('p10_rel', 0) * 100:>+7.1f}% {r.get('p90_rel', 0) * 100:>+7.1f}%")
    for n in t.get("notes", []):
        print(f"  note: {n}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from calibrate.compare import compare_reading, summary_lines, write_simulated_trace
    from calibrate.document import fit_document, read_any
    from calibrate.steps import parse_step
    from sim.calibration import load_calibration, parse_calibration

    _refuse_same("--sim-trace", args.sim_trace, [args.trace, *([args.calibration] if args.calibration else [])])
    step = parse_step(args.step)
    reading, _, _ = read_any(args.trace, step=step)
    if reading is None:
        raise ConfigError(f"{args.trace}: compare needs a GPU kernel trace (a real job's), not moesim op events")
    if args.calibration:
        cal = load_calibration(args.calibration)
        how = f"calibration {args.calibration}"
    else:
        doc = fit_document([args.trace], gpu=args.gpu, name="in-sample", exclude_layer=args.holdout_layer, step=step)
        cal = parse_calibration(json.dumps(doc), "fit of " + str(args.trace))
        how = ("fitted on this trace" + (f" without layer {args.holdout_layer}" if args.holdout_layer is not None
                                         else " (in sample)"))
    layers = sorted({k.layer for k in reading.kernels if k.layer >= 0})
    if args.holdout_layer is not None and args.holdout_layer not in layers:
        raise ConfigError(f"--holdout-layer {args.holdout_layer}: the trace has layers {layers}")
    comp = compare_reading(reading, cal, layer=args.holdout_layer)
    if cal.gpu == "h800" and layers:  # DeepSeek's traced job: its window as `moesim predict` predicts it
        from calibrate.traced_plan import predicted_pair

        comp.predicted_busy = predicted_pair(cal, layers=len(layers))
    steps = next((n for n in reading.notes if n.startswith("steps: ")), None)
    # everything is computed before the simulated trace is written: a compare that fails writes nothing
    if args.json:
        text = json.dumps({"trace": str(args.trace), "calibration": how, **({"steps": steps[7:]} if steps else {}),
                           **comp.to_dict()}, indent=1, allow_nan=False)
    else:
        text = "\n".join([f"compare {args.trace}: {how}" + (f"; per-op times of layer {args.holdout_layer}"
                                                            if args.holdout_layer is not None
                                                            else "; per-op medians over layers"),
                          *([steps] if steps else []), *summary_lines(comp)])
    if args.sim_trace:
        write_simulated_trace(comp, args.sim_trace, name=f"moesim simulated ({how})")
    print(text)
    if args.sim_trace and not args.json:
        print(f"simulated trace: {args.sim_trace}")
    return 0


def _cmd_profile(args: argparse.Namespace) -> int:
    from calibrate.microbench import profile_device

    path = profile_device(args.out, device=args.device, quick=args.quick, progress=not args.no_progress)
    print(f"calibrate profile: wrote {path}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from calibrate.microbench import fit_profile, profile_device

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="moesim-calibrate-") as tmp:
        profile = profile_device(Path(tmp) / "profile", device=args.device, quick=args.quick,
                                 progress=not args.no_progress)
        fit_profile(profile, args.out, name=args.name or Path(args.out).stem)
    print(f"calibrate run: wrote {args.out} in {time.perf_counter() - t0:.1f} s")
    return 0


_STEP_HELP = ("which ProfilerStep#N of a multi-step trace: N, or all complete steps (default: the complete steps "
              "averaged, the first left out when there are more than 2)")


def add_calibrate_parser(subparsers: Any) -> None:
    """Register ``moesim calibrate`` and its subcommands."""
    parser = subparsers.add_parser("calibrate", help="profile, fit, show and compare calibrations",
                                   description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="calibrate_command", required=True, metavar="SUBCOMMAND")
    fit = sub.add_parser("fit", help="fit traces (or a profile.json) into a calibration file")
    fit.add_argument("inputs", nargs="+", metavar="TRACE", help="Kineto/Chrome trace(s) (.json/.json.gz) or profile.json")
    fit.add_argument("--out", type=non_empty, required=True, help="calibration file to write")
    fit.add_argument("--gpu", type=non_empty, help="catalog GPU the trace ran on (default: from the trace's deviceProperties)")
    fit.add_argument("--name", help="calibration name (default: the output file's stem)")
    fit.add_argument("--step", metavar="all|N", help=_STEP_HELP)
    fit.set_defaults(handler=_cmd_fit)
    show = sub.add_parser("show", help="print a calibration file")
    show.add_argument("file", help="calibration file or bundled name (h800-deepseek-trace, b200-published, ...)")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_cmd_show)
    cmp_ = sub.add_parser("compare", help="measured vs simulated per op and for the traced window")
    cmp_.add_argument("trace")
    cmp_.add_argument("--calibration", type=non_empty, help="calibration to simulate with (default: fit this trace)")
    cmp_.add_argument("--holdout-layer", type=int, help="fit without this layer and compare on it")
    cmp_.add_argument("--gpu", type=non_empty, help="catalog GPU (default: from the trace)")
    cmp_.add_argument("--sim-trace", type=non_empty, metavar="FILE", help="write the simulated window as a Chrome trace")
    cmp_.add_argument("--step", metavar="all|N", help=_STEP_HELP)
    cmp_.add_argument("--json", action="store_true")
    cmp_.set_defaults(handler=_cmd_compare)
    for name, handler, text in (("profile", _cmd_profile, "microbenchmarks + reference runs into DIR/profile.json"),
                                ("run", _cmd_run, "profile and fit on this machine")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
        p.add_argument("--out", type=non_empty, required=True, help="output folder (profile) or calibration file (run)")
        p.add_argument("--quick", action="store_true", help="the smallest grid (tests)")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        if name == "run":
            p.add_argument("--name", help="calibration name")
        p.set_defaults(handler=handler)

