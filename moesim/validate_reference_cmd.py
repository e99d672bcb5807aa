"""``moesim validate-reference --calibration FILE [--json] [--quick]``: close the loop on this machine.

Runs the reference layer (``python -m reference.run`` subprocesses, gloo for EP > 1) over configurations the
calibration did not use (:data:`HELD_OUT`: token counts, hidden sizes, expert counts, world sizes 1 / 2 / 4),
predicts the same steps with the simulator's op graph and cost model (:mod:`calibrate.layer_model`), and
prints each case and the mean absolute percentage error. ``--json`` prints
``{"cases": [{"name", "measured_s", "predicted_s", "error"}, ...], "mape": ...}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

__all__ = ["HELD_OUT", "QUICK", "validate_reference", "add_validate_reference_parser"]


def _cases() -> tuple[Any, ...]:
    from calibrate.microbench import RefCase

    return (RefCase("T512-D256-E8-ep1", 512), RefCase("T2048-D256-E8-ep1", 2048),
            RefCase("T512-D384-E8-ep1", 512, dim=384), RefCase("T512-D256-E16-ep2", 512, ep=2, experts=16),
            RefCase("T1024-D384-E8-ep2", 1024, ep=2, dim=384), RefCase("T256-D256-E8-ep4", 256, ep=4),
            RefCase("T512-D256-E16-ep4", 512, ep=4, experts=16))


HELD_OUT = ("T512-D256-E8-ep1", "T2048-D256-E8-ep1", "T512-D384-E8-ep1", "T512-D256-E16-ep2",
            "T1024-D384-E8-ep2", "T256-D256-E8-ep4", "T512-D256-E16-ep4")
QUICK = ("T192-D256-E8-ep1",)


def validate_reference(calibration: str, *, quick: bool = False, progress: bool = False) -> dict[str, Any]:
    """Measure and predict every held-out case; returns the ``--json`` document."""
    from calibrate.layer_model import layer_time, model_from_fields
    from calibrate.microbench import (
        _DEBUG,
        CALIBRATION_CASES,
        THREADS_PER_RANK,
        RefCase,
        run_reference_case,
    )
    from sim.calibration import load_calibration

    cal = load_calibration(calibration)
    if "launch_overhead_s" not in cal.tables or "device_spec" not in cal.tables:
        raise ConfigError(f"{calibration}: not a calibration of this machine (run `moesim calibrate run --device cpu`)")
    cases = (RefCase("T192-D256-E8-ep1", 192, steps=3),) if quick else _cases()
    used = {(c.tokens, c.ep, c.dim, c.experts) for c in CALIBRATION_CASES}
    assert not any((c.tokens, c.ep, c.dim, c.experts) in used for c in cases), "held-out cases must differ"
    rows = []
    with tempfile.TemporaryDirectory(prefix="moesim-validate-") as tmp:
        for case in cases:
            if progress:
                print(f"validate-reference: running {case.name}", file=sys.stderr, flush=True)
            run = run_reference_case(case, Path(tmp))
            if not run["ok"]:
                raise ConfigError(f"reference run {case.name} failed: {run['error']}")
            model = model_from_fields({**_DEBUG, **case.model_fields()}, case.name)
            pred = layer_time(cal, model, case.tokens, case.ep, threads=THREADS_PER_RANK)
            m, p = float(run["measured_s"]), pred.total_s
            rows.append({"name": case.name, "measured_s": m, "predicted_s": p, "error": p / m - 1,
                         "tokens": case.tokens, "ep": case.ep, "dim": case.dim, "experts": case.experts,
                         "steps_s": run["step_s"]})
    mape = sum(abs(r["error"]) for r in rows) / len(rows)
    return {"calibration": cal.summary(), "cases": rows, "mape": mape}


def _format(doc: dict[str, Any]) -> str:
    lines = [f"validate-reference: calibration {doc['calibration']['name']} ({doc['calibration']['path']})",
             f"{'case':<22} {'tokens':>6} {'ep':>3} {'D':>4} {'E':>3} {'measured ms':>12} {'predicted ms':>13} {'error':>8}"]
    for r in doc["cases"]:
        lines.append(f"{r['name']:<22} {r['tokens']:>6} {r['ep']:>3} {r['dim']:>4} {r['experts']:>3} "
                     f"{r['measured_s'] * 1e3:>12.2f} {r['predicted_s'] * 1e3:>13.2f} {r['error'] * 100:>+7.1f}%")
    lines.append(f"MAPE {doc['mape'] * 100:.1f}% over {len(doc['cases'])} held-out cases")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    try:
        doc = validate_reference(args.calibration, quick=args.quick, progress=not args.json)
    except OSError as err:
        raise ConfigError(str(err)) from None
    if args.json:
        print(json.dumps({"cases": [{k: r[k] for k in ("name", "measured_s", "predicted_s", "error")}
                                    for r in doc["cases"]], "mape": doc["mape"]}, indent=1, allow_nan=False))
    else:
        print(_format(doc))
    return 0


def add_validate_reference_parser(subparsers: Any) -> None:
    """Register ``moesim validate-reference``."""
    p = subparsers.add_parser("validate-reference", help="run the reference on CPU over held-out shapes and "
                              "compare with the simulator's prediction", description=__doc__.splitlines()[0])
    p.add_argument("--calibration", required=True, help="calibration of this machine (moesim calibrate run)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="one tiny case (the CI check of the loop)")
    p.set_defaults(handler=_run)

