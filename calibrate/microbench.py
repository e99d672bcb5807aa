"""``moesim calibrate profile`` / ``run`` on a machine we have: microbenchmarks + reference runs -> a calibration.

:func:`profile_device` runs every group of :mod:`reference.bench` and the calibration runs of the
reference layer (:data:`CALIBRATION_CASES`) in subprocesses (calibrate itself never imports torch), with a
``rich`` progress bar, and writes ``DIR/profile.json``. :func:`fit_profile` turns that into a calibration
file: the device's rates (best measured GEMM rate as its "peak", measured memory bandwidth), GEMM and
grouped-GEMM efficiency curves vs size, attention efficiency, all-to-all latency and bandwidth per world
size, the GEMM slowdown while an all-to-all runs, and the framework overhead per simulated op, fitted so
the simulator's layer time (:mod:`calibrate.layer_model`) matches the calibration runs. The held-out runs
of ``moesim validate-reference`` use none of these runs.

CPU conventions (stated in every CPU calibration's notes): the reference runs fp32 on CPUs, so the curves
are stored under the ``bf16`` key the workload asks for, and the device's memory bandwidth is half the
measured one because fp32 elements are twice the BF16 bytes the workload counts.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibrate.fit import Sample, fit_curve, residual_stats
from sim.calibration import parse_calibration
from sim.errors import ConfigError
from sim.fileio import write_atomic

__all__ = ["RefCase", "CALIBRATION_CASES", "GROUPS", "profile_device", "require_device", "fit_profile", "is_profile",
           "run_reference_case", "PROFILE_SCHEMA", "subprocess_env"]

PROFILE_SCHEMA = "moesim.calibration-profile/1"
GROUPS = ("gemm", "grouped", "attn", "mem", "quant", "a2a", "interference", "deepep")
THREADS_PER_RANK = 1


@dataclass(frozen=True)
class RefCase:
    """One reference-layer run: a model (catalog name or overrides of the debug model), tokens, EP size."""

    name: str
    tokens: int
    ep: int = 1
    dim: int = 256
    experts: int = 8
    steps: int = 5

    def model_fields(self) -> dict[str, Any]:
        return {"dim": self.dim, "n_routed_experts": self.experts}


#: Runs the CPU calibration fits its framework overhead to (validate-reference holds out others).
#: Mostly small token counts: there the step is per-op framework overhead and memory-bound ops, which these
#: runs fit (GEMMs and attention come from the microbenchmarks); the EP2 runs fit the all-to-all path's host cost.
CALIBRATION_CASES = (RefCase("cal-T64-ep1", 64), RefCase("cal-T128-ep1", 128), RefCase("cal-T384-ep1", 384),
                     RefCase("cal-T128-ep2", 128, ep=2), RefCase("cal-T64-ep2", 64, ep=2))

_DEBUG = {"n_layers": 4, "n_dense_layers": 1, "dim": 256, "n_heads": 4, "vocab_size": 1024, "dense_inter_dim": 512,
          "attention": "mla", "q_lora_rank": 64, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 32,
          "v_head_dim": 32, "n_routed_experts": 8, "n_shared_experts": 1, "top_k": 2, "moe_inter_dim": 128,
          "n_group": 4, "topk_group": 2, "score_func": "sigmoid", "route_scale": 2.5, "norm_topk_prob": True}


def model_toml(case: RefCase) -> str:
    """The debug model with the case's overrides, as a model TOML (top-level ModelSpec fields)."""
    fields = {**_DEBUG, **case.model_fields()}
    lines = [f'source = "moesim calibration case {case.name}: the debug model with dim {case.dim}, '
             f'{case.experts} experts"']
    for k, v in fields.items():
        lines.append(f"{k} = {json.dumps(v) if not isinstance(v, bool) else str(v).lower()}")
    return "\n".join(lines) + "\n"


def subprocess_env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, TORCHAO_FORCE_SKIP_LOADING_SO_FILES="1", OMP_NUM_THREADS=str(THREADS_PER_RANK))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_reference_case(case: RefCase, work: Path, device: str = "cpu", timeout_s: float = 300.0) -> dict[str, Any]:
    """Run the reference layer for ``case``; returns its shapes and timing (the least-disturbed step)."""
    work.mkdir(parents=True, exist_ok=True)
    model_path = work / f"{case.name}.toml"
    model_path.write_text(model_toml(case), encoding="utf-8")
    prof = work / f"{case.name}-run"
    cmd = [sys.executable, "-m", "reference.run", "--model", str(model_path), "--precision", "fp32",
           "--tokens", str(case.tokens), "--steps", str(case.steps), "--warmup", "2", "--device", device,
           "--ep", str(case.ep), "--profile", str(prof), "--profile-steps", "1"]
    if case.ep > 1:
        cmd += ["--dispatch", "all_to_all"]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=subprocess_env())
    except subprocess.TimeoutExpired:
        return {"case": case.name, "ok": False, "error": f"timed out after {timeout_s:.0f} s"}
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"case": case.name, "ok": False, "error": tail}
    meta = json.loads((prof / "meta.json").read_text(encoding="utf-8"))
    timing = meta["timing"]
    per_rank = timing.get("cpu_step_s_per_rank") if device == "cpu" else None
    per_rank = per_rank or timing["step_s_per_rank"]
    steps = [max(r[i] for r in per_rank) for i in range(min(len(r) for r in per_rank))]
    return {"case": case.name, "ok": True, "tokens": case.tokens, "ep": case.ep, "dim": case.dim,
            "experts": case.experts, "model": {**_DEBUG, **case.model_fields()}, "step_s": steps,
            "measured_s": min(steps), "clock": "process_time" if device == "cpu" else timing.get("clock"),
            "wall_step_s": [max(r[i] for r in timing["step_s_per_rank"]) for i in range(len(steps))], "shapes": meta.get("shapes"), "versions": meta.get("versions"),
            "device": meta.get("device"), "git": meta.get("git")}


def _bench(group: str, device: str, quick: bool, folder: Path, timeout_s: float = 240.0) -> dict[str, Any]:
    out = folder / f"bench-{group}.json"
    cmd = [sys.executable, "-m", "reference.bench", group, "--device", device, "--out", str(out)]
    if quick:
        cmd.append("--quick")
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=subprocess_env())
    except subprocess.TimeoutExpired:
        return {"group": group, "rows": [{"skipped": f"timed out after {timeout_s:.0f} s"}]}
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"group": group, "rows": [{"skipped": f"failed: {tail}"}]}
    data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return data


def require_device(device: str) -> None:
    """Raise :class:`ConfigError` unless ``device`` (``cpu`` or ``cuda``) can run here, before anything is made."""
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"profile: --device must be cpu or cuda, got {device!r}")
    if device == "cuda":
        try:
            import torch
        except ImportError:
            raise ConfigError("profile: --device cuda needs torch (pip install '.[reference]')") from None
        if not torch.cuda.is_available():
            raise ConfigError(f"profile: --device cuda, but CUDA is not available here (torch {torch.__version__}, "
                              f"CUDA build {torch.version.cuda or 'none'}, no GPU visible); use --device cpu")


def profile_device(out_dir: str | Path, *, device: str = "cpu", quick: bool = False, progress: bool = True,
                   cases: Sequence[RefCase] = CALIBRATION_CASES) -> Path:
    """Run the microbenchmarks and calibration runs; write ``out_dir/profile.json`` and return its path."""
    require_device(device)
    out = Path(out_dir)
    target = out / "profile.json"
    if target.exists():
        raise ConfigError(f"profile: {target} exists; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    groups = GROUPS if not quick else ("gemm", "grouped", "attn", "mem", "a2a", "deepep")
    steps: list[tuple[str, Any]] = [(f"bench {g}", g) for g in groups] + [(f"reference {c.name}", c) for c in cases]
    results: dict[str, Any] = {}
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="moesim-profile-", dir=out) as tmp:
        work = Path(tmp)

        def do(item: Any) -> None:
            if isinstance(item, str):
                for _attempt in range(3):  # a loaded shared machine can time a collective out: retry
                    results[item] = _bench(item, device, quick, work)
                    rows = results[item].get("rows", [])
                    if not (rows and all("skipped" in r for r in rows) and "failed" in str(rows[0].get("skipped"))):
                        break
            else:
                runs.append(run_reference_case(item, work, device))

        if progress and sys.stderr.isatty():
            from rich.progress import Progress

            with Progress(transient=True) as bar:
                task = bar.add_task("calibrate profile", total=len(steps))
                for label, item in steps:
                    bar.update(task, description=label)
                    do(item)
                    bar.advance(task)
        else:
            for label, item in steps:
                if progress:
                    print(f"calibrate profile: {label}", file=sys.stderr, flush=True)
                do(item)
    ok = [r for r in runs if r["ok"]]
    versions = ok[0]["versions"] if ok else {}
    doc = {"schema": PROFILE_SCHEMA, "device": device, "cores": os.cpu_count() or 1, "threads_per_rank": THREADS_PER_RANK,
           "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "versions": versions,
           "git": ok[0]["git"] if ok else None, "device_info": ok[0]["device"] if ok else None,
           "quick": quick, "groups": {g: r.get("rows", []) for g, r in results.items()}, "reference_runs": runs}
    write_atomic(target, json.dumps(doc, indent=1))
    return target


def is_profile(path: str | Path) -> bool:
    """Whether ``path`` is a ``profile.json`` of :func:`profile_device` (by its schema)."""
    p = Path(path)
    if p.suffix != ".json" or not p.is_file() or p.stat().st_size > 50_000_000:
        return False
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("schema") == PROFILE_SCHEMA


def _rows(profile: dict[str, Any], group: str) -> list[dict[str, Any]]:
    rows = profile.get("groups", {}).get(group, [])
    return [r for r in rows if isinstance(r, dict) and "skipped" not in r]


def _linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least squares y = a + b x with a, b >= 0."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0
    b = max(b, 1e-18)
    a = max(my - b * mx, 0.0)
    return a, b


def fit_profile(profile_path: str | Path, out: str | Path, *, name: str | None = None) -> dict[str, Any]:
    """``moesim calibrate fit PROFILE``: the calibration of the profiled device (see the module docstring)."""
    from calibrate.layer_model import fit_overhead
    from sim.fileio import read_input

    raw = read_input(profile_path, "profile file")  # a regular file, size-bounded (sim.limits.MAX_INPUT_MB)
    try:
        prof = json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise ConfigError(f"{profile_path}: not a readable profile: {err}") from None
    if not isinstance(prof, dict) or prof.get("schema") != PROFILE_SCHEMA:
        raise ConfigError(f"{profile_path}: not a {PROFILE_SCHEMA} file")
    gemm = _rows(prof, "gemm")
    if not gemm:
        raise ConfigError(f"{profile_path}: no GEMM measurements to fit")
    peak = max(r["flops"] / r["seconds"] for r in gemm)
    mem = _rows(prof, "mem")
    bw = max((r["bytes"] / r["seconds"] for r in mem), default=10e9)
    tables: dict[str, Any] = {"residuals": {}, "comm_rates": {}}
    gs = [Sample("moe.router", "fwd", "gemm", "bf16", r["flops"], r["flops"], r["seconds"]) for r in gemm]
    curve, stats = fit_curve(gs, peak)
    tables["gemm_eff"] = {"bf16": curve}
    tables["residuals"]["gemm_eff.bf16"] = stats
    grouped = _rows(prof, "grouped")
    if grouped:
        ss = [Sample("moe.expert_gemm", "fwd", "grouped_gemm", "bf16", r["M"], r["flops"], r["seconds"]) for r in grouped]
        curve, stats = fit_curve(ss, peak)
        tables["grouped_gemm_eff"] = {"bf16": curve}
        tables["residuals"]["grouped_gemm_eff.bf16"] = stats
    attn = [r for r in _rows(prof, "attn") if r.get("mla", True)]
    if attn:
        tables["attn_eff"] = {}
        for key, part, mult in (("fwd", "fwd_s", 1.0), ("bwd", "bwd_s", 2.0)):
            ss = [Sample("attn.core", key, "attn", "bf16", mult * r["flops_fwd"], mult * r["flops_fwd"], r[part])
                  for r in attn]
            curve, stats = fit_curve(ss, peak)
            tables["attn_eff"][key] = curve
            tables["residuals"][f"attn_eff.{key}"] = stats
            e = min(1.5, statistics.median(s.work / (peak * s.seconds) for s in ss))
            tables[f"attn_{key}_eff"] = float(f"{e:.6g}")
    if mem:
        tables["mem_bw_eff"] = 1.0
        tables["residuals"]["mem_bw_eff"] = residual_stats([(r["bytes"] / bw) / r["seconds"] - 1 for r in mem])
    quant = [r for r in _rows(prof, "quant") if not r.get("rearrange")]
    rearrange = [r for r in _rows(prof, "quant") if r.get("rearrange")]
    if rearrange:
        tables.setdefault("op_seconds", {})["moe.quantize.rearrange.s_per_elem"] = float(
            f"{statistics.median(r['seconds'] / r['elems'] for r in rearrange):.6g}")
    if quant:
        rates = [r["elems"] * (2 + 1 + 1 / 32) / r["seconds"] for r in quant]
        tables["quantize_bw_eff"] = round(min(1.5, statistics.median(rates) / (bw / 2)), 6)
    by_world: dict[int, list[dict[str, Any]]] = {}
    for r in _rows(prof, "a2a"):
        by_world.setdefault(int(r["world"]), []).append(r)
    for world, rows in sorted(by_world.items()):
        a, b = _linear_fit([r["bytes_per_rank"] for r in rows], [r["seconds"] for r in rows])
        tables["comm_rates"][f"gloo.all_to_all.w{world}"] = {"overhead_s": float(f"{a:.6g}"),
                                                             "bytes_per_s": float(f"{1 / b:.6g}")}
        tables["residuals"][f"comm_rates.gloo.all_to_all.w{world}"] = residual_stats(
            [(a + b * r["bytes_per_rank"]) / r["seconds"] - 1 for r in rows])
    inter = _rows(prof, "interference")
    if inter:
        slow = statistics.median(r["gemm_during_a2a_s"] / r["gemm_alone_s"] - 1 for r in inter)
        tables["sm_sharing"] = {"comm_sms": 0.0, "fitted_slowdown": round(max(slow, 0.0), 4), "model_slowdown": 0.0}
    cores = int(prof.get("cores", 1))
    device_spec = {"name": f"cpu-{cores}core", "bf16_flops": peak, "fp8_flops": peak, "hbm_bw_bytes_per_s": bw / 2,
                   "num_sms": 1, "nvlink_bw_bytes_per_s": bw / 2, "arch": "cpu",
                   "source": f"measured by moesim calibrate profile ({cores} cores, {THREADS_PER_RANK} thread per rank): "
                             "best fp32 GEMM rate as peak; add() bandwidth / 2 (fp32 vs the BF16 bytes counted)"}
    tables["device_spec"] = device_spec
    tables["host_sync_s"] = 0.0
    tables = {k: v for k, v in tables.items() if v != {}}
    info = prof.get("device_info") or {}
    versions = prof.get("versions") or {}
    provenance = {"device": f"{info.get('type', prof.get('device'))} {info.get('name', '')} ({cores} cores)".strip(),
                  "driver": None, "torch": versions.get("torch"), "torchao": versions.get("torchao"),
                  "deep_ep": versions.get("deep_ep"), "git": (prof.get("git") or {}).get("commit")
                  if isinstance(prof.get("git"), dict) else prof.get("git"),
                  "date": prof.get("date"), "sources": [f"{Path(profile_path).name} (moesim calibrate profile)"],
                  "method": "moesim calibrate run: microbenchmarks + reference-layer calibration runs"}
    notes = ["CPU: the reference runs fp32; curves are stored under the 'bf16' key the workload asks for",
             "CPU: hbm_bw is half the measured add() bandwidth (fp32 elements are twice the BF16 bytes counted)",
             "CPU: compute is timed by per-process CPU time (one thread per rank) so other jobs on the "
             "machine do not inflate it; all-to-alls by the wall clock"]
    for g, rows in prof.get("groups", {}).items():
        for r in rows:
            if isinstance(r, dict) and "skipped" in r:
                notes.append(f"{g}: skipped: {r['skipped']}")
    doc: dict[str, Any] = {"schema": "moesim.calibration", "version": 2, "name": name or Path(out).stem,
                           "gpu": device_spec["name"], "provenance": provenance,
                           "kernels": {"fp32": "real", "mxfp8": "emulated" if _rows(prof, "quant") else "absent",
                                       "deepep": "absent"},
                           **tables, "notes": notes,
                           "sources": {"device_spec": device_spec["source"],
                                       "gemm_eff": "fitted: fp32 GEMM microbenchmarks (M, N, K grid), min of repeats",
                                       "comm_rates": "fitted: gloo all_to_all_single latency + bytes/s per world size"}}
    runs = [r for r in prof.get("reference_runs", []) if r.get("ok")]
    if any(int(r["ep"]) > 1 for r in runs) and not by_world:
        reason = "; ".join(str(r.get("skipped")) for r in prof.get("groups", {}).get("a2a", []) if isinstance(r, dict))
        raise ConfigError(f"{profile_path}: the EP calibration runs need all-to-all rates, but the a2a "
                          f"microbenchmark has none ({reason or 'not run'})")
    if runs:
        cal = parse_calibration(json.dumps(doc), "profile fit")
        overhead, k, host, errors = fit_overhead(cal, runs, threads=int(prof.get("threads_per_rank", 1)))
        doc["launch_overhead_s"] = float(f"{overhead:.6g}")
        doc["mem_bw_eff"] = float(f"{doc.get('mem_bw_eff', 1.0) / k:.6g}")
        doc["sources"]["mem_bw_eff"] = (f"fitted: the layer's memory-bound ops run {k:.2f}x slower than the streaming "
                                        "add() microbenchmark, from the single-rank calibration runs")
        doc["host_sync_s"] = float(f"{host:.6g}")
        doc["sources"]["host_sync_s"] = ("fitted: the EP path's host-side cost per blocking host sync (split sizes "
                                         "exchange and copy) on the EP > 1 calibration runs, after the per-op overhead")
        doc["residuals"]["launch_overhead_s"] = residual_stats(errors)
        doc["sources"]["launch_overhead_s"] = ("fitted: framework overhead per simulated op so the layer model "
                                               "matches the single-rank calibration runs (" + ", ".join(
                                                   r["case"] for r in runs) + ")")
    text = json.dumps(doc, indent=1, allow_nan=False)
    parse_calibration(text, str(out))
    write_atomic(out, text + "\n")
    return doc
