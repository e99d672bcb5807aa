"""The capacity sweep's HTML report: throughput and scaling efficiency against GPU count, heatmaps, the
Pareto front of time-to-train against GPUs, cost where a price per GPU-hour is given, and the step-time
breakdown of the fastest configuration per model and GPU count (one colour per category, :mod:`studies.colours`).
Series of a model on a GPU type take the GPU's colour and the model's marker symbol and line dash
(:func:`studies.colours.gpu_colours`, :func:`studies.colours.model_marks`), in every chart, with the legend
below the plot.

Built from the results table alone (``read_results``), so a resumed or partial sweep reports what it has;
the step-time breakdowns of the fastest configurations are predicted again from their rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.errors import MoesimError
from studies.colours import breakdown_colours, gpu_colours, model_marks
from studies.report import Section, table_html, write_report

if TYPE_CHECKING:
    from sim.predict import Prediction

__all__ = ["capacity_sections", "write_capacity_report", "pareto_front", "row_prediction"]

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


def _style(colour: str, mark: tuple[str, str]) -> dict[str, dict[str, object]]:
    """A line-and-marker series' style: the GPU's colour, the model's marker symbol and line dash."""
    symbol, dash = mark
    return {"line": {"color": colour, "dash": dash}, "marker": {"color": colour, "symbol": symbol, "size": 8}}


def _legend_below(fig: Any, plot_height_px: int = 460, entries_per_row: int = 4, row_px: int = 22) -> None:
    """A horizontal legend under the plot, shown even for one series, with the figure made tall enough
    for its rows (so a 24-series legend never covers the plot or scrolls)."""
    n = len(fig.data)
    rows = -(-n // entries_per_row)
    legend_px = rows * row_px + 60
    fig.update_layout(
        showlegend=True, height=plot_height_px + legend_px + 100, margin={"b": legend_px + 40},
        legend={"orientation": "h", "x": 0, "xanchor": "left", "y": -60 / plot_height_px, "yanchor": "top",
                "entrywidth": 1.0 / entries_per_row, "entrywidthmode": "fraction"})


def _plan(r: Row) -> str:
    vpp = f" vpp{r['vpp']}" if r["pp_schedule"] == "interleaved-1f1b" else ""
    return f"TP{r['tp']} PP{r['pp']} {r['pp_schedule']}{vpp} EP{r['ep']} {r['ac']} mb{r['micro_batch']}"


def row_prediction(r: Row) -> Prediction:
    """The prediction of an ok row's plan at its point, predicted again from the row's fields (the results
    table stores no breakdown); a MoesimError where this build of sim cannot predict it."""
    from sim.catalog import load_model
    from sim.specs import ParallelPlan
    from studies._sim import predict_run
    from studies.capacity import point_cluster
    from studies.capacity_spec import Point

    point = Point(r["model"], r["gpu"], int(r["n_gpus"]), float(r["nic_gbps"] or 0), r["nvlink_domain"],
                  float(r["oversubscription"] or 1), r["precision"], r["ep_backend"], r["stack"], int(r["seq_len"]),
                  int(r["global_batch"]))
    tp, pp = int(r["tp"]), int(r["pp"])
    plan = ParallelPlan(tp=tp, pp=pp, pp_schedule=r["pp_schedule"], vpp=int(r["vpp"]), ep=int(r["ep"]),
                        dp_shard=point.n_gpus // (tp * pp), seq_len=point.seq_len, global_batch=point.global_batch,
                        micro_batch=int(r["micro_batch"]), ac=r["ac"], precision=point.precision,
                        ep_backend=point.ep_backend)
    return predict_run(load_model(point.model), point_cluster(point), plan, point.stack)


def _breakdown_section(rows: Sequence[Row], models: list[str]) -> Section:
    """Stacked step-time breakdowns of the fastest configuration per model and GPU count, one chart per
    model, every key in its :mod:`studies.colours` colour."""
    import plotly.graph_objects as go

    figs, failed, moved = [], [], 0
    for model in models:
        best = _best_by([r for r in rows if r["model"] == model], ("n_gpus",))
        bars: list[tuple[str, dict[str, float]]] = []
        for (n,), r in sorted(best.items(), key=lambda kv: int(kv[0][0])):
            try:
                pred = row_prediction(r)
            except (MoesimError, KeyError, ValueError) as err:
                failed.append(f"{model} on {n} GPUs ({err})")
                continue
            if abs(pred.step_time_s - float(r["step_time_s"])) > 1e-4 * max(1.0, pred.step_time_s):
                moved += 1
            bars.append((f"{n} x {r['gpu']}", pred.breakdown))
        if not bars:
            continue
        fig = go.Figure()
        colours = breakdown_colours(sorted({k for _, b in bars for k in b}))
        for key, colour in colours.items():
            fig.add_trace(go.Bar(name=key, x=[label for label, _ in bars], y=[b.get(key, 0.0) for _, b in bars],
                                 marker_color=colour))
        fig.update_layout(barmode="stack", title=f"{model}: step-time breakdown of the fastest configuration per "
                          "GPU count (s, busiest pipeline rank; sums to the step)", xaxis_title="GPUs x GPU type",
                          yaxis_title="seconds", height=560)
        figs.append(fig)
    text = ("The plan of each row of the table below, predicted again from the row (the results table holds no "
            "breakdown). Each category has the same colour in every chart.")
    if moved:
        text += f" {moved} of them now predict a step time other than the table's (a newer build of sim)."
    if failed:
        text += " Not predicted: " + "; ".join(failed) + "."
    return Section("Step-time breakdown", text, figs)


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
    colour = gpu_colours(sorted({r["gpu"] for r in ok}))
    marks = model_marks(models)
    thr, eff = go.Figure(), go.Figure()
    best_of = {model: _best_by([r for r in ok if r["model"] == model], ("gpu", "n_gpus")) for model in models}
    for gpu in colour:  # grouped by GPU in the legend: one colour per block
        for model in models:
            best = best_of[model]
            series = sorted(((int(k[1]), float(v["tokens_per_s_per_gpu"]), _plan(v)) for k, v in best.items()
                             if k[0] == gpu))
            if not series:
                continue
            xs, ys, plans = [s[0] for s in series], [s[1] for s in series], [s[2] for s in series]
            style = _style(colour[gpu], marks[model])
            name = f"{gpu} / {model}"
            thr.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=name, text=plans, **style,
                                     hovertemplate="%{x} GPUs: %{y:.0f} tok/s/GPU<br>%{text}"))
            eff.add_trace(go.Scatter(x=xs, y=[y / ys[0] for y in ys], mode="lines+markers", name=name, **style))
    thr.update_layout(title="Throughput (tokens/s per GPU) vs GPU count", xaxis_type="log", yaxis_type="log",
                      xaxis_title="GPUs", yaxis_title="tokens/s per GPU")
    eff.update_layout(title="Scaling efficiency (tokens/s per GPU relative to the series' smallest GPU count)",
                      xaxis_type="log", xaxis_title="GPUs", yaxis_title="efficiency")
    _legend_below(thr)
    _legend_below(eff)
    sections.append(Section("Throughput and scaling", "Lines: GPU type / model (colour: GPU type; marker and "
                            "dash: model), best over fabric, precision, EP backend and stack. Hover for the plan.",
                            [thr, eff]))
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
        symbol, dash = marks[model]
        for gpu in colour:
            sel = [r for r in ok if r["model"] == model and r["gpu"] == gpu]
            if sel:
                pareto.add_trace(go.Scatter(x=[int(r["n_gpus"]) for r in sel],
                                            y=[float(r["time_to_train_days"]) for r in sel], mode="markers",
                                            opacity=0.45, name=f"{gpu} / {model}", legendgroup=model,
                                            marker={"color": colour[gpu], "symbol": symbol, "size": 8}))
        front = pareto_front([(int(r["n_gpus"]), float(r["time_to_train_days"])) for r in ok if r["model"] == model])
        pareto.add_trace(go.Scatter(x=[p[0] for p in front], y=[p[1] for p in front], mode="lines+markers",
                                    name=f"{model} Pareto front", legendgroup=model,
                                    line={"color": "#444444", "dash": dash},
                                    marker={"color": "#444444", "symbol": symbol, "size": 9}))
    pareto.update_layout(title="Time to train vs GPUs (Pareto front: no point is faster with as few GPUs)",
                         xaxis_type="log", yaxis_type="log", xaxis_title="GPUs", yaxis_title="days")
    _legend_below(pareto)
    sections.append(Section("Time to train", "", [pareto]))
    priced = [r for r in ok if r["cost_usd"]]
    if priced:
        cost = go.Figure()
        for gpu in colour:
            for model in models:
                sel = [r for r in priced if r["model"] == model and r["gpu"] == gpu]
                if not sel:
                    continue
                cost.add_trace(go.Scatter(x=[float(r["time_to_train_days"]) for r in sel],
                                          y=[float(r["cost_usd"]) for r in sel], mode="markers",
                                          name=f"{gpu} / {model}",
                                          marker={"color": colour[gpu], "symbol": marks[model][0], "size": 8},
                                          text=[f"{r['n_gpus']} x {r['gpu']}" for r in sel],
                                          hovertemplate="%{text}: %{x:.1f} days, $%{y:,.0f}"))
        cost.update_layout(title="Cost (USD) vs time to train", xaxis_type="log", yaxis_type="log",
                           xaxis_title="days", yaxis_title="USD")
        _legend_below(cost)
        sections.append(Section("Cost", "From the price per GPU-hour given in the spec. Colour: GPU type; "
                                "marker: model.", [cost]))
    else:
        sections.append(Section("Cost", "No price per GPU-hour in the spec ([capacity] price_per_gpu_hour): no cost chart."))
    table_rows = []
    for model in models:
        best = _best_by([r for r in ok if r["model"] == model], ("n_gpus",))
        for (n,), r in sorted(best.items(), key=lambda kv: int(kv[0][0])):
            table_rows.append([model, n, r["gpu"], r["precision"], r["ep_backend"], r["nic_gbps"], r["nvlink_domain"],
                               _plan(r), f"{float(r['tokens_per_s_per_gpu']):.0f}", f"{float(r['mfu']) * 100:.1f}%",
                               r["peak_memory_gib"], f"{float(r['time_to_train_days']):.1f}"])
    sections.append(_breakdown_section(ok, models))
    sections.append(Section("Fastest configuration per model and GPU count", "", [], [table_html(
        ["model", "GPUs", "GPU", "precision", "EP backend", "NIC Gb/s", "NVLink", "plan", "tok/s/GPU", "MFU",
         "peak GiB", "days"], table_rows)]))
    return sections


def write_capacity_report(rows: Sequence[Row], path: str | Path, notes: str = "") -> Path:
    """Write the report of ``rows`` to ``path`` (atomically)."""
    return write_report(path, "moesim capacity study", capacity_sections(rows), notes)
