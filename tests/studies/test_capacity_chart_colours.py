"""The capacity report's model x GPU charts, rendered in headless Chromium: each GPU type is drawn in one colour
of its own, the same for every model and in every chart (the model told apart by marker symbol and dash), every
chart with a series has a legend, drawn whole below the plot area, and the screenshot is not blank. Colours are
read back from what plotly resolved and drew (``_fullData`` and the legend's swatches), not from the figure
Python built. Needs Debian's ``chromium`` (skips without it, fails under ``MOESIM_CI=1`` via conftest)."""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from studies.capacity import read_results, run_sweep
from studies.capacity_report import write_capacity_report
from studies.capacity_spec import spec_from_mapping
from studies.colours import GPU_COLOURS, gpu_colours, model_marks

pytestmark = pytest.mark.browser

CHROMIUM = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
MODELS, GPUS = ["deepseek-v3-16b", "qwen3-30b-a3b"], ["b200", "gb200", "h100"]
# Per plot: title, every trace as plotly resolved it (name, colour, symbol, dash, shown in the legend), the
# drawn legend entries (name, swatch stroke/fill colours) and the boxes of the plot area, legend and page svg.
PROBE = """<script>window.addEventListener('load',function(){setTimeout(function(){var out=[];
document.querySelectorAll('.js-plotly-plot').forEach(function(gd){var lay=gd._fullLayout||{};
var box=function(el){if(!el)return null;var r=el.getBoundingClientRect();return [r.left,r.top,r.right,r.bottom]};
var entries=Array.from(gd.querySelectorAll('.legend .traces')).map(function(g){var d=g.__data__;d=d&&d[0];
d=d&&(d.trace||(d[0]&&d[0].trace));return {name:d?String(d.name):null,paint:Array.from(g.querySelectorAll(
'.legendpoints path')).map(function(p){var s=getComputedStyle(p);return [s.fill,s.stroke]})}});
out.push({title:String((lay.title&&lay.title.text)||''),traces:(gd._fullData||[]).map(function(t){return {
name:String(t.name),type:t.type,colour:t.marker?String(t.marker.color):null,symbol:t.marker?String(t.marker.symbol):null,
dash:t.line?String(t.line.dash):null,legend:t.showlegend!==false}}),entries:entries,
plot:box(gd.querySelector('.bglayer rect.bg')||gd.querySelector('.nsewdrag')),legend:box(gd.querySelector('.legend')),
svg:box(gd.querySelector('.main-svg'))})});var c=document.createElement('pre');c.id='charts';
c.textContent=JSON.stringify(out);document.body.appendChild(c)},1500)});</script>"""


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return path


def rgb(colour: str) -> tuple[int, int, int]:
    colour = colour.strip()
    if re.fullmatch(r"#[0-9a-fA-F]{6}", colour):
        return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)
    m = re.fullmatch(r"rgba?\((\d+),\s*(\d+),\s*(\d+)(?:,\s*[\d.]+)?\)", colour)
    assert m, f"not a colour: {colour!r}"
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def png_distinct_bytes(path: Path) -> int:
    """Distinct byte values in the PNG's decompressed pixel data (a blank page gives a handful)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(idat)))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chromium()
    out = tmp_path_factory.mktemp("capacity")
    spec = spec_from_mapping({
        "capacity": {"price_per_gpu_hour": 4.0},
        "search": {"tp": [1], "pp": [1], "schedules": ["1f1b"], "ep": [8], "ac": ["full"], "micro_batch": [1]},
        "sweep": [{"models": MODELS, "gpus": GPUS, "gpu_counts": [64, 128], "precisions": ["bf16"],
                   "seq_len": 2048, "global_batch": 512}]})
    return write_capacity_report(read_results(run_sweep(spec, out / "sweep", workers=1)), out / "report.html")


def rendered(path: Path, tmp_path: Path) -> tuple[list[dict[str, Any]], Path]:
    exe = chromium()
    probed = tmp_path / "probed.html"
    probed.write_text(path.read_text(encoding="utf-8").replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    shot = tmp_path / "report.png"  # one Chromium run: the DOM after the probe, and the screenshot
    dom = subprocess.run([exe, *CHROMIUM, "--window-size=1280,1600", "--virtual-time-budget=20000", "--dump-dom",
                          f"--screenshot={shot}", probed.as_uri()], check=False, capture_output=True, text=True,
                         timeout=180).stdout
    m = re.search(r'<pre id="charts">(.*?)</pre>', dom, re.DOTALL)
    assert m, "the probe did not run (JavaScript did not execute)"
    return json.loads(html.unescape(m.group(1))), shot


def test_gpu_colours_and_model_marks_in_chromium(report: Path, tmp_path: Path) -> None:
    charts, shot = rendered(report, tmp_path)
    assert shot.exists() and png_distinct_bytes(shot) > 32, "blank screenshot"
    series = [c for c in charts if any(" / " in t["name"] for t in c["traces"])]
    titles = {c["title"].split(" ")[0] for c in series}
    assert {"Throughput", "Scaling", "Time", "Cost"} <= titles, [c["title"] for c in charts]
    expected_marks = model_marks(MODELS)
    colour_of: dict[str, tuple[int, int, int]] = {}
    for chart in series:
        where = chart["title"]
        pairs = [t for t in chart["traces"] if " / " in t["name"]]
        for t in pairs:
            gpu, model = t["name"].split(" / ")
            colour = rgb(t["colour"])
            assert colour_of.setdefault(gpu, colour) == colour, f"{where}: {gpu} drawn {colour}, elsewhere {colour_of[gpu]}"
            assert t["symbol"] == expected_marks[model][0], f"{where}: {t['name']} marker {t['symbol']}"
            if where.startswith(("Throughput", "Scaling")):  # lines: the model's dash too
                assert t["dash"] == expected_marks[model][1], f"{where}: {t['name']} dash {t['dash']}"
        got = {(t["name"].split(" / ")[0]) for t in pairs}
        assert got == set(GPUS), f"{where}: GPUs {got}"
        # every model on a GPU: the GPU's colour; distinct (colour, symbol) per series within the chart
        styles = [(rgb(t["colour"]), t["symbol"]) for t in pairs]
        assert len(set(styles)) == len(styles), f"{where}: two series share colour and marker"
        # the legend is drawn, whole, under the plot area, and each swatch wears its series' colour
        assert chart["legend"] is not None, f"{where}: no legend"
        drawn = {e["name"]: e["paint"] for e in chart["entries"]}
        assert {t["name"] for t in chart["traces"] if t["legend"]} <= set(drawn), f"{where}: legend lacks series"
        for t in pairs:
            paints = {rgb(c) for p in drawn[t["name"]] for c in p if c not in ("none", "rgba(0, 0, 0, 0)")}
            assert rgb(t["colour"]) in paints, f"{where}: {t['name']} swatch {paints}"
        lx0, ly0, lx1, ly1 = chart["legend"]
        py1 = chart["plot"][3]
        sx0, _, sx1, sy1 = chart["svg"]
        assert ly0 >= py1 - 1, f"{where}: the legend ({ly0}) overlaps the plot area (bottom {py1})"
        assert sx0 - 1 <= lx0 and lx1 <= sx1 + 1 and ly1 <= sy1 + 1, f"{where}: the legend is cut by the figure"
    assert len(set(colour_of.values())) == len(GPUS), f"GPUs share a colour: {colour_of}"
    assert {g: colour_of[g] for g in GPUS} == {g: rgb(c) for g, c in gpu_colours(GPUS).items()}
    assert all(colour_of[g] == rgb(GPU_COLOURS[g]) for g in GPUS)


def test_six_gpus_four_models_never_share_a_colour_within_a_gpu() -> None:
    """The default sweep's 24 series: six GPU colours, all distinct; four models, four marks, all distinct."""
    gpus = ["h100", "h200", "b200", "gb200", "b300", "gb300"]
    models = ["deepseek-v3-16b", "deepseek-v2-236b", "deepseek-v3-671b", "kimi-k2"]
    colours, marks = gpu_colours(gpus), model_marks(models)
    assert len({rgb(c) for c in colours.values()}) == 6 and len(set(marks.values())) == 4
    assert len({m[0] for m in marks.values()}) == 4 and len({m[1] for m in marks.values()}) == 4
