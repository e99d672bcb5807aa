"""Profile the executable reference over a grid of precisions and sizes; collect per-op times.

Each run is ``python -m reference.run ... --profile DIR`` in a subprocess (calibrate reads what the
reference writes; it does not import torch itself). The result is one ``calibration-input.json``:
per run, the reference's ``meta.json`` (device, versions, shapes, backends, emulated or real kernels)
and the per-op statistics of its rank-0 trace by shared op name, labelled with the device. The cost
fitting (a later step) reads these files.

The GPU recipe (one H200 or B200): ``python -m calibrate profile --label H200 --out runs/h200`` profiles
the DeepSeek-V3 16B layer in bf16 and MXFP8 (real kernels on SM100, emulated elsewhere) at 4,096 and
16,384 tokens. ``--smoke`` runs the same pipeline on the CPU with the debug model in seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibrate.traces import load_trace, op_durations
from sim.errors import ConfigError

__all__ = ["ProfileCase", "GPU_CASES", "SMOKE_CASES", "profile_cases"]

SCHEMA = "moesim.calibration-input/1"


@dataclass(frozen=True)
class ProfileCase:
    """One reference run: model, precision of the routed-expert GEMMs, tokens per rank."""

    model: str
    precision: str
    tokens: int
    steps: int = 5

    @property
    def name(self) -> str:
        return f"{self.model}-{self.precision}-T{self.tokens}"


GPU_CASES = tuple(ProfileCase("deepseek-v3-16b", precision, tokens)
                  for precision in ("bf16", "mxfp8") for tokens in (4096, 16384))
SMOKE_CASES = tuple(ProfileCase("debug", precision, 64, steps=1) for precision in ("fp32", "mxfp8"))


def _run_case(case: ProfileCase, out_dir: Path, device: str, timeout_s: float) -> dict[str, Any]:
    run_dir = out_dir / case.name
    command = [sys.executable, "-m", "reference.run", "--model", case.model, "--precision", case.precision,
               "--tokens", str(case.tokens), "--steps", str(case.steps), "--device", device,
               "--profile", str(run_dir)]
    env = dict(os.environ, TORCHAO_FORCE_SKIP_LOADING_SO_FILES="1")
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"case": case.name, "ok": False, "error": tail}
    meta = json.loads((run_dir / "meta.json").read_text(encoding="utf-8"))
    stats = op_durations(load_trace(run_dir / "trace_rank0.json"))
    return {
        "case": case.name,
        "ok": True,
        "meta": meta,
        "ops": {name: {"count": s.count, "total_s": s.total_s, "mean_s": s.mean_s, "source": s.source}
                for name, s in stats.items()},
    }


def profile_cases(cases: Sequence[ProfileCase], out_dir: str | Path, label: str, *, device: str = "auto",
                  timeout_s: float = 300.0) -> Path:
    """Run every case, write ``out_dir/calibration-input.json`` and return its path.

    A failing case is recorded with its error message (one bad case does not lose the others).
    """
    if not label.strip():
        raise ConfigError("profile: --label must name the device (e.g. H200), got an empty string")
    out = Path(out_dir)
    if (out / "calibration-input.json").exists():
        raise ConfigError(f"profile: {out / 'calibration-input.json'} exists; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    runs = [_run_case(case, out, device, timeout_s) for case in cases]
    document = {"schema": SCHEMA, "device_label": label, "runs": runs}
    target = out / "calibration-input.json"
    partial = target.with_suffix(".json.partial")
    partial.write_text(json.dumps(document, indent=2), encoding="utf-8")
    partial.replace(target)
    return target
