"""The seed study: the PyTorch/Nebius DeepSeek-V3 671B runs on 256 B200 reproduced, as an HTML report.

The three measured TorchTitan variants and the unpublished MXFP8-without-DeepEP one (the built-in
scenario ``dsv3-671b-b200``), and the same four variants of DeepSeek-V3 16B (predicted only: no
measurement published) on 64 B200. The report shows predicted vs measured (with intervals when
``sim.uncertainty`` provides them), the step-time breakdown of each variant, and a simulated timeline of
compute and communication streams: an overlapped forward/backward pair when the trace has one with op
detail, else one MoE layer's forward and backward.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.catalog import load_cluster, load_model
from sim.loaders import derive_plan_fields, plan_from_mapping
from sim.predict import Prediction
from sim.scenarios import DEFAULT_SCENARIO, load_scenario
from studies._sim import INTERVAL_NOTE, STACK_NOTE, interval_for, predict_run
from studies.colours import breakdown_colours
from studies.report import Section, ensure_dir, table_html, write_report

__all__ = ["SeedRow", "seed_rows", "timeline_window", "seed_sections", "write_seed_report", "SMALL_MODEL"]

SMALL_MODEL = {"model": "deepseek-v3-16b", "gpus": 64, "overrides": {"tp": 1, "pp": 1, "vpp": 1,
                                                                     "pp_schedule": "1f1b", "ep": 8,
                                                                     "dp_shard": 64, "global_batch": 512}}


@dataclass
class SeedRow:
    """One variant of the seed study."""

    group: str
    variant: str
    prediction: Prediction
    measured: float | None
    fitted: bool
    source: str
    interval: tuple[float, float] | None


def seed_rows() -> list[SeedRow]:
    """Predict the seed scenario's variants (671B on 256 B200) and the 16B model's (64 B200)."""
    sc = load_scenario(DEFAULT_SCENARIO)
    rows: list[SeedRow] = []
    for group, model_name, gpus, overrides in (
            (f"DeepSeek-V3 671B, {sc.gpus} B200", sc.model, sc.gpus, {}),
            (f"DeepSeek-V3 16B, {SMALL_MODEL['gpus']} B200 (predicted only)", SMALL_MODEL["model"],
             SMALL_MODEL["gpus"], SMALL_MODEL["overrides"])):
        model = load_model(str(model_name))
        cluster = load_cluster(sc.cluster, n_gpus=int(str(gpus)))
        for v in sc.variants:
            fields = {**sc.base, **v.plan, **overrides}  # type: ignore[dict-item]
            plan = plan_from_mapping(derive_plan_fields(fields, cluster.n_gpus), f"seed variant {v.name!r}")
            pred = predict_run(model, cluster, plan, "torchtitan", name=v.name)
            measured = v.measured_tokens_per_s_per_gpu if not overrides else None
            rows.append(SeedRow(group, v.name, pred, measured, v.fitted and not overrides,
                                v.source if not overrides else "not measured", interval_for(pred, "torchtitan")))
    return rows


#: All-to-alls (dispatch and combine, both microbatches) an overlapped-pair timeline shows: two MoE layer pairs.
PAIR_WINDOW_A2AS = 8


def timeline_window(pred: Prediction) -> tuple[str, list[dict[str, Any]]]:
    """(title, op slices) of the timeline to draw: the first overlapped F&B pair with op detail, else the
    forward and the backward of the first MoE layer of microbatch 0 on pipeline rank 0 (times in us,
    relative to the window's start; each slice has ``stream``, ``name``, ``start``, ``end``)."""
    from sim.trace import chrome_trace_events

    pipe = pred.trace_data["pipeline"] if pred.trace_data else None
    first_pair = min((a[2] for a in pipe.actions[0] if a[0] == "FB"), default=0) if pipe else 0
    events = chrome_trace_events(pred, detail_microbatches=first_pair + 1)
    pid = 0
    ops = [e for e in events if e.get("ph") == "X" and e.get("pid") == pid and e.get("cat") not in ("pipeline", "layer")]
    pairs = [e for e in events if e.get("ph") == "X" and e.get("pid") == pid and e.get("cat") == "pipeline"
             and str(e["name"]).startswith("FB")]
    for pair in pairs:
        inside = [e for e in ops if pair["ts"] <= e["ts"] < pair["ts"] + pair["dur"]]
        if inside:
            a2a_ends = sorted(e["ts"] + e["dur"] for e in inside if e["name"] in ("moe.dispatch", "moe.combine"))
            if len(a2a_ends) > PAIR_WINDOW_A2AS:  # a chunk pair has many layers: show its first layer pairs
                cut = a2a_ends[PAIR_WINDOW_A2AS - 1]
                inside = [e for e in inside if e["ts"] < cut]
                return (f"overlapped F&B pair ({pair['name']}), its first {PAIR_WINDOW_A2AS} all-to-alls",
                        _relative(inside, pair["ts"]))
            return f"overlapped F&B pair ({pair['name']})", _relative(inside, pair["ts"])
    layers = [e for e in events if e.get("ph") == "X" and e.get("pid") == pid and e.get("cat") == "layer"
              and e["name"] == "layer moe" and e["args"].get("microbatch") == 0]
    out: list[dict[str, Any]] = []
    offset = 0.0
    for phase in ("fwd", "bwd"):
        layer = next((e for e in layers if e["args"].get("phase") == phase), None)
        if layer is None:
            continue
        inside = [e for e in ops if layer["ts"] <= e["ts"] < layer["ts"] + layer["dur"]]
        for s in _relative(inside, layer["ts"]):
            s["start"] += offset
            s["end"] += offset
            s["phase"] = phase
            out.append(s)
        offset += layer["dur"]
    return "one MoE layer: forward, then backward with recompute (no overlapped pair with op detail in this build)", out


#: The what-if of the timeline section: the seed's fastest measured variant under DualPipeV.
WHATIF_VARIANT = "mxfp8 grouped + DeepEP"
WHATIF_SCHEDULE = "pp_schedule dualpipev"
WHATIF_NOTE = "PyTorch's ScheduleDualPipeV, same TP2 PP2 EP32 layout and batch"


def overlapped_whatif(rows: list[SeedRow]) -> Prediction | None:
    """The seed's :data:`WHATIF_VARIANT` re-planned with DualPipeV (its forward/backward pairs overlapped);
    None when the rows lack that variant."""
    row = next((r for r in rows if r.variant == WHATIF_VARIANT), None)
    if row is None:
        return None
    p = row.prediction
    plan = plan_from_mapping({**p.plan, "pp_schedule": "dualpipev", "vpp": 1}, "seed what-if")
    model = load_model(p.model)
    cluster = load_cluster(load_scenario(DEFAULT_SCENARIO).cluster, n_gpus=p.n_gpus)
    return predict_run(model, cluster, plan, "torchtitan", name=f"{WHATIF_VARIANT}, dualpipev")


def _relative(events: list[dict[str, Any]], t0: float) -> list[dict[str, Any]]:
    return [{"stream": str(e.get("cat")), "name": str(e["name"]), "start": e["ts"] - t0,
             "end": e["ts"] - t0 + e["dur"], "phase": str(e.get("args", {}).get("phase", ""))} for e in events]


def seed_sections(rows: list[SeedRow]) -> list[Section]:
    import plotly.graph_objects as go

    sections = []
    table = []
    for group in dict.fromkeys(r.group for r in rows):
        sel = [r for r in rows if r.group == group]
        base = sel[0]
        for r in sel:
            p = r.prediction
            err = f"{(p.tokens_per_s_per_gpu / r.measured - 1) * 100:+.1f}%" if r.measured else "-"
            msp = (f"{r.measured / base.measured:.3f}x" if r.measured and base.measured else "-")
            table.append([group, r.variant + (" (fitted)" if r.fitted else ""), f"{p.tokens_per_s_per_gpu:.1f}",
                          f"{r.measured:.0f}" if r.measured else "-", err,
                          f"{r.interval[0]:.0f}-{r.interval[1]:.0f}" if r.interval else "none",
                          f"{p.tokens_per_s_per_gpu / base.prediction.tokens_per_s_per_gpu:.3f}x", msp,
                          f"{p.step_time_s:.1f}", f"{p.mfu * 100:.1f}%", f"{p.peak_memory_bytes / 2**30:.1f}",
                          "yes" if p.fits_in_memory else "NO"])
    sections.append(Section("Predicted vs measured", "Measured: pytorch.org blog 2026-03-25 (TorchTitan, 256 HGX "
                            "B200, 400G IB). The BF16 baseline is the one run the stack is fitted to; the others are "
                            f"predicted. {STACK_NOTE}. {INTERVAL_NOTE}.", [], [table_html(
                                ["group", "variant", "predicted tok/s/GPU", "measured", "error", "interval",
                                 "pred. speedup", "meas. speedup", "step s", "MFU", "peak GiB", "fits"], table)]))
    bar_figs, stack_figs = [], []
    for group in dict.fromkeys(r.group for r in rows):
        sel = [r for r in rows if r.group == group]
        bars = go.Figure()
        err_y: dict[str, Any] | None = None
        if all(r.interval for r in sel):
            err_y = {"type": "data", "symmetric": False,
                   "array": [r.interval[1] - r.prediction.tokens_per_s_per_gpu for r in sel if r.interval],
                   "arrayminus": [r.prediction.tokens_per_s_per_gpu - r.interval[0] for r in sel if r.interval]}
        bars.add_trace(go.Bar(name="predicted", x=[r.variant for r in sel],
                              y=[r.prediction.tokens_per_s_per_gpu for r in sel], error_y=err_y))
        meas = [r for r in sel if r.measured]
        if meas:
            bars.add_trace(go.Bar(name="measured", x=[r.variant for r in meas], y=[r.measured for r in meas]))
        bars.update_layout(barmode="group", title=f"{group}: tokens/s per GPU, predicted vs measured"
                           + ("" if err_y else " (no interval in this build)"), yaxis_title="tokens/s per GPU", height=460)
        bar_figs.append(bars)
        stack = go.Figure()
        colours = breakdown_colours(sorted({k for r in sel for k in r.prediction.breakdown}))
        for cat, colour in colours.items():
            stack.add_trace(go.Bar(name=cat, x=[r.variant for r in sel], marker_color=colour,
                                   y=[r.prediction.breakdown.get(cat, 0.0) for r in sel]))
        stack.update_layout(barmode="stack", title=f"{group}: step-time breakdown (s, busiest pipeline rank; sums "
                            "to the step)", yaxis_title="seconds", height=560)
        stack_figs.append(stack)
    sections.append(Section("Throughput", "", bar_figs))
    sections.append(Section("Step-time breakdown", "", stack_figs))
    figs = []
    whatif = overlapped_whatif(rows)
    timelines = ([(f"what-if {whatif.name}", whatif)] if whatif is not None else []) + [
        (r.variant, r.prediction) for r in rows[:4]]
    for label, pred in timelines:
        title, slices = timeline_window(pred)
        fig = go.Figure()
        for stream in dict.fromkeys(s["stream"] for s in slices):
            mine = [s for s in slices if s["stream"] == stream]
            fig.add_trace(go.Bar(orientation="h", y=[stream] * len(mine), base=[s["start"] for s in mine],
                                 x=[s["end"] - s["start"] for s in mine], name=stream,
                                 text=[s["name"] for s in mine], textposition="none", hovertemplate="%{text}<br>start %{base:.0f} us, "
                                 "%{x:.0f} us"))
        fig.update_layout(title=f"{label}: {title}", xaxis_title="microseconds", barmode="overlay",
                          height=320)
        figs.append(fig)
    sections.append(Section(
        "Simulated timeline", "Compute and communication streams of the representative rank (pipeline rank 0, "
        "microbatch 0), from the simulator's Chrome trace events (sim.trace). The published runs overlap no "
        "all-to-all with compute (TorchTitan's interleaved 1F1B runs one microbatch at a time), so the first "
        f"timeline is a what-if: the {WHATIF_VARIANT} variant with {WHATIF_SCHEDULE} ({WHATIF_NOTE}), whose "
        "overlapped forward/backward pair hides each microbatch's dispatch and combine behind the other's "
        "compute. Then one MoE layer's forward and backward of each variant as run.", figs))
    return sections


def write_seed_report(out_dir: str | Path) -> tuple[Path, list[SeedRow]]:
    """Predict the seed study and write ``out_dir/seed-report.html``; returns (path, rows)."""
    out = ensure_dir(out_dir)
    rows = seed_rows()
    path = write_report(out / "seed-report.html", "moesim seed study: DeepSeek-V3 on B200 (TorchTitan, MXFP8, DeepEP)",
                        seed_sections(rows))
    return path, rows
