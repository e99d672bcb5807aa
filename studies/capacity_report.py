"""The capacity sweep's HTML report: throughput and scaling efficiency against GPU count, heatmaps, the
Pareto front of time-to-train against GPUs, and cost where a price per GPU-hour is given.

Built from the results table alone (``read_results``), so a resumed or partial sweep reports what it has.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from studies.report import Section, table_html, write_report

__all__ = ["capacity_sections", "write_capacity_report", "pareto_front"]

Row = dict[str, str]


def _ok(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r["status"] == "ok"]


def _best_by(rows: Sequence[Row], key: tuple[str, ...]) -> dict[tuple[str, ...], Row]:
    """The fastest row (tokens/s per GPU) of each group of ``key`` fields."""
    best: dict[tuple[str, ...], Row] = {}
    for r in _ok(rows):
        k = tuple(r[f] for f in key)
        if k not in best or float(r["tokens_per_s_per_gpu"]) > float(best[k]["tokens_per_s_per_gpu"]):
            best[k] = r
    return best


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (gpus, days) points no other point beats on both (fewer or equal GPUs and fewer days).

    >>> pareto_front([(64, 30.0), (128, 40.0), (128, 12.0), (256, 6.0), (512, 7.0)])
    [(64, 30.0), (128, 12.0), (256, 6.0)]
    """
    front: list[tuple[float, float]] = []
    for g, d in sorted(points, key=lambda p: (p[0], p[1])):
        if not front or d < front[-1][1]:
            if front and front[-1][0] == g:
                continue
            front.append((g, d))
    return front


def _plan(r: Row) -> str:
    vpp = f" vpp{r['vpp']}" if r["pp_schedule"] == "interleaved-1f1b" else ""
    return f"TP{r['tp']} PP{r['pp']} {r['pp_schedule']}{vpp} EP{r['ep']} {r['ac']} mb{r['micro_batch']}"


def capacity_sections(rows: Sequence[Row]) -> list[Section]:
    """Report sections for the rows of a results table."""
    import plotly.graph_objects as go

    ok = _ok(rows)
    models = sorted({r["model"] for r in ok})
    sections: list[Section] = []
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        counts["ok" if r["status"] == "ok" else r["status"].split(" (")[0]] += 1
    evaluated = sum(int(r["plans_evaluated"] or 0) for r in rows)
    pruned = sum(int(r["plans_pruned"] or 0) for r in rows)
    sections.append(Section("Points", f"{len(rows)} points: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
                            + f". Plans predicted {evaluated}, pruned by a proven lower bound {pruned}. Each ok point "
                            "is the fastest plan of the search space that fits in memory, best over the sweep's other "
                            "dimensions where a chart has fewer axes than the sweep."))
    thr, eff = go.Figure(), go.Figure()
    for model in models:
        best = _best_by([r for r in ok if r["model"] == model], ("gpu", "n_gpus"))
        for gpu in sorted({k[0] for k in best}):
            series = sorted(((int(k[1]), float(v["tokens_per_s_per_gpu"]), _plan(v)) for k, v in best.items()
                             if k[0] == gpu))
            xs, ys, plans = [s[0] for s in series], [s[1] for s in series], [s[2] for s in series]
            name = f"{model} / {gpu}"
            thr.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=name, text=plans,
                                     hovertemplate="%{x} GPUs: %{y:.0f} tok/s/GPU<br>%{text}"))
            eff.add_trace(go.Scatter(x=xs, y=[y / ys[0] for y in ys], mode="lines+markers", name=name))
    thr.update_layout(title="Throughput (tokens/s per GPU) vs GPU count", xaxis_type="log", yaxis_type="log",
                      xaxis_title="GPUs", yaxis_title="tokens/s per GPU", height=560)
    eff.update_layout(title="Scaling efficiency (tokens/s per GPU relative to the series' smallest GPU count)",
                      xaxis_type="log", xaxis_title="GPUs", yaxis_title="efficiency", height=560)
    sections.append(Section("Throughput and scaling", "Lines: model / GPU type, best over fabric, precision, "
                            "EP backend and stack. Hover for the plan.", [thr, eff]))
    heat = []
    for model in models:
        best = _best_by([r for r in ok if r["model"] == model], ("gpu", "n_gpus"))
        gpus = sorted({k[0] for k in best})
        ns = sorted({int(k[1]) for k in best})
        z = [[float(best[(g, str(n))]["tokens_per_s_per_gpu"]) if (g, str(n)) in best else None for n in ns]
             for g in gpus]
        fig = go.Figure(go.Heatmap(z=z, x=[str(n) for n in ns], y=gpus, colorscale="Viridis",
                                   colorbar={"title": "tok/s/GPU"}))
        fig.update_layout(title=f"{model}: tokens/s per GPU by GPU type and count", xaxis_title="GPUs", height=380)
        heat.append(fig)
    sections.append(Section("Heatmaps", "Blank cells: no plan of the search space fits (or the precision does "
                            "not run on that GPU).", heat))
    pareto = go.Figure()
    for model in models:
        pts = [(int(r["n_gpus"]), float(r["time_to_train_days"])) for r in ok if r["model"] == model]
        pareto.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="markers", opacity=0.35,
                                    name=f"{model} (all points)"))
        front = pareto_front(pts)
        pareto.add_trace(go.Scatter(x=[p[0] for p in front], y=[p[1] for p in front], mode="lines+markers",
                                    name=f"{model} Pareto front"))
    pareto.update_layout(title="Time to train vs GPUs (Pareto front: no point is faster with as few GPUs)",
                         xaxis_type="log", yaxis_type="log", xaxis_title="GPUs", yaxis_title="days", height=560)
    sections.append(Section("Time to train", "", [pareto]))
    priced = [r for r in ok if r["cost_usd"]]
    if priced:
        cost = go.Figure()
        for model in models:
            sel = [r for r in priced if r["model"] == model]
            cost.add_trace(go.Scatter(x=[float(r["time_to_train_days"]) for r in sel],
                                      y=[float(r["cost_usd"]) for r in sel], mode="markers", name=model,
                                      text=[f"{r['n_gpus']} x {r['gpu']}" for r in sel],
                                      hovertemplate="%{text}: %{x:.1f} days, $%{y:,.0f}"))
        cost.update_layout(title="Cost (USD) vs time to train", xaxis_type="log", yaxis_type="log",
                           xaxis_title="days", yaxis_title="USD", height=560)
        sections.append(Section("Cost", "From the price per GPU-hour given in the spec.", [cost]))
    else:
        sections.append(Section("Cost", "No price per GPU-hour in the spec ([capacity] price_per_gpu_hour): no cost chart."))
    table_rows = []
    for model in models:
        best = _best_by([r for r in ok if r["model"] == model], ("n_gpus",))
        for (n,), r in sorted(best.items(), key=lambda kv: int(kv[0][0])):
            table_rows.append([model, n, r["gpu"], r["precision"], r["ep_backend"], r["nic_gbps"], r["nvlink_domain"],
                               _plan(r), f"{float(r['tokens_per_s_per_gpu']):.0f}", f"{float(r['mfu']) * 100:.1f}%",
                               r["peak_memory_gib"], f"{float(r['time_to_train_days']):.1f}"])
    sections.append(Section("Fastest configuration per model and GPU count", "", [], [table_html(
        ["model", "GPUs", "GPU", "precision", "EP backend", "NIC Gb/s", "NVLink", "plan", "tok/s/GPU", "MFU",
         "peak GiB", "days"], table_rows)]))
    return sections


def write_capacity_report(rows: Sequence[Row], path: str | Path, notes: str = "") -> Path:
    """Write the report of ``rows`` to ``path`` (atomically)."""
    return write_report(path, "moesim capacity study", capacity_sections(rows), notes)
