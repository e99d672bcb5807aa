"""``meta.json``: what ran, where, with which versions, shapes and backends, and how long it took.

Everything the calibrator needs to interpret a reference trace without guessing: device and software
versions, world size and EP degree, the model spec and tensor shapes (T, S, B, D, F, E, e, K, H), the
GEMM backend (precision, kernel, emulated or real) and the dispatch backend, step times, and the git
revision of the code that produced it.
"""

from __future__ import annotations

import dataclasses
import datetime
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from reference.names import REFERENCE_OPS
from sim.specs import ModelSpec

__all__ = ["SCHEMA", "git_revision", "device_info", "versions", "build_meta"]

SCHEMA = "moesim.reference.meta/1"


def git_revision(path: Path | None = None) -> dict[str, Any]:
    """``{"commit": sha, "dirty": bool}`` of the repository holding ``path`` (this package by default)."""
    where = str(path or Path(__file__).resolve().parent)
    try:
        sha = subprocess.run(
            ["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}
    return {"commit": sha, "dirty": bool(status)}


def device_info(device: torch.device) -> dict[str, Any]:
    """The accelerator (or CPU) the layer ran on."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {
            "type": "cuda",
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "num_sms": props.multi_processor_count,
            "memory_bytes": props.total_memory,
            "count": torch.cuda.device_count(),
        }
    return {
        "type": "cpu",
        "name": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
    }


def versions() -> dict[str, Any]:
    """Python, torch, CUDA, NCCL, torchao and (if loaded) DeepEP versions."""
    out: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    out["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        try:
            out["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError):
            out["nccl"] = None
    try:
        import torchao

        out["torchao"] = torchao.__version__
    except ImportError:
        out["torchao"] = None
    deep_ep = sys.modules.get("deep_ep")
    out["deep_ep"] = getattr(deep_ep, "__version__", "unknown") if deep_ep is not None else None
    return out


def build_meta(
    *,
    spec: ModelSpec,
    layer_id: int,
    is_moe: bool,
    shapes: dict[str, int],
    gemm: dict[str, Any],
    dispatch: dict[str, Any],
    device: torch.device,
    world_size: int,
    process_group: str | None,
    timing: dict[str, Any],
    traces: list[str],
    argv: list[str],
) -> dict[str, Any]:
    """The ``meta.json`` document (JSON-serialisable)."""
    return {
        "schema": SCHEMA,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git": git_revision(),
        "argv": argv,
        "device": device_info(device),
        "versions": versions(),
        "world_size": world_size,
        "process_group": process_group,
        "model": dataclasses.asdict(spec),
        "layer": {"id": layer_id, "kind": "moe" if is_moe else "dense"},
        "shapes": shapes,
        "backends": {"gemm": gemm, "dispatch": dispatch},
        "timing": timing,
        "traces": traces,
        "ops": list(REFERENCE_OPS),
    }
