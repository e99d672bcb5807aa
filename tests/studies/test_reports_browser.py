"""The HTML reports render in headless Chromium: no JavaScript errors, every plot drawn, a screenshot that
is not blank, and every step-time breakdown chart draws each breakdown key in one colour of its own, the
one :mod:`studies.colours` gives it (read back from the rendered bars and legend, not from the figure
Python built). Needs Debian's ``chromium`` (``.ci/run`` installs it; outside CI the test skips without it)."""

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
from studies.colours import BREAKDOWN_COLOURS, breakdown_colours
from studies.seed import write_seed_report

pytestmark = pytest.mark.browser

CHROMIUM = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
# Counts uncaught errors and console.error calls, and how many plotly plots finished drawing; then writes what
# each plot drew, colours included (window.__colours), as JSON into <pre id='colours'>.
PROBE = """<script>window.__errors=[];window.addEventListener('error',function(e){window.__errors.push(String(e.message))});
var _ce=console.error;console.error=function(){window.__errors.push(Array.from(arguments).join(' '));_ce.apply(console,arguments)};
window.addEventListener('load',function(){setTimeout(function(){var d=document.createElement('pre');d.id='probe';
d.textContent='errors='+window.__errors.length+';plots='+document.querySelectorAll('.js-plotly-plot .main-svg').length+
';divs='+document.querySelectorAll('.js-plotly-plot').length+';msg='+window.__errors.join('|');document.body.appendChild(d);
var c=document.createElement('pre');c.id='colours';try{c.textContent=JSON.stringify(window.__colours())}catch(e){c.textContent='ERR '+e};
document.body.appendChild(c)},1500)});
// Per plot: its title and barmode, each trace's name and resolved marker colour (_fullData), the computed fill
// of every bar path drawn for each trace, and of each legend swatch (trace from the d3 data bound to the group).
window.__colours=function(){var name=function(g){var d=g.__data__;d=d&&d[0];d=d&&(d.trace||(d[0]&&d[0].trace));
return d?String(d.name):null};return Array.from(document.querySelectorAll('.js-plotly-plot')).map(function(gd){
var lay=gd._fullLayout||{},bars={},legend={};
gd.querySelectorAll('.barlayer .trace').forEach(function(g){var n=name(g);bars[n]=(bars[n]||[]).concat(
Array.from(g.querySelectorAll('path')).map(function(p){return getComputedStyle(p).fill}))});
gd.querySelectorAll('.legend .traces').forEach(function(g){var n=name(g);legend[n]=(legend[n]||[]).concat(
Array.from(g.querySelectorAll('.legendpoints path')).map(function(p){return getComputedStyle(p).fill}))});
return {id:gd.id,title:String((lay.title&&lay.title.text)||''),barmode:String(lay.barmode||''),
traces:(gd._fullData||[]).map(function(t){return {name:String(t.name),type:t.type,colour:t.marker?String(t.marker.color):null}}),
bars:bars,legend:legend}})};</script>"""


def browser() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return path


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


def render(html_path: Path, tmp_path: Path) -> tuple[str, Path]:
    probed = tmp_path / ("probed-" + html_path.name)
    text = html_path.read_text(encoding="utf-8")
    probed.write_text(text.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    exe = browser()
    dom = subprocess.run([exe, *CHROMIUM, "--virtual-time-budget=20000", "--dump-dom", probed.as_uri()],
                         capture_output=True, text=True, timeout=180)
    shot = tmp_path / (html_path.stem + ".png")
    subprocess.run([exe, *CHROMIUM, "--window-size=1280,1600", "--virtual-time-budget=20000",
                    f"--screenshot={shot}", html_path.as_uri()], capture_output=True, text=True, timeout=180)
    return dom.stdout, shot


def rgb(colour: str) -> tuple[int, int, int]:
    """``#RRGGBB`` or a computed ``rgb(r, g, b)`` / ``rgba(r, g, b, 1)`` as a tuple, for comparing colours."""
    colour = colour.strip()
    if re.fullmatch(r"#[0-9a-fA-F]{6}", colour):
        return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)
    m = re.fullmatch(r"rgba?\((\d+),\s*(\d+),\s*(\d+)(?:,\s*1(?:\.0*)?)?\)", colour)
    assert m, f"not an opaque colour: {colour!r}"
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def check_breakdown_colours(plots: list[dict[str, Any]], min_charts: int) -> dict[str, tuple[int, int, int]]:
    """Every step-time breakdown chart (a stacked bar chart so titled) drew each key once, in one colour, the
    colour of :mod:`studies.colours`, distinct from every other key's; returns {key: rendered colour}."""
    charts = [p for p in plots if p["barmode"] == "stack" and "step-time breakdown" in p["title"]]
    assert len(charts) >= min_charts, [p["title"] for p in plots]
    seen: dict[str, tuple[int, int, int]] = {}
    for chart in charts:
        where = chart["title"]
        names = [t["name"] for t in chart["traces"]]
        assert names and all(t["type"] == "bar" for t in chart["traces"]), where
        assert len(set(names)) == len(names), f"{where}: a key has more than one trace: {names}"
        unknown = sorted(set(names) - set(BREAKDOWN_COLOURS))
        assert not unknown, f"{where}: breakdown keys missing from studies.colours.BREAKDOWN_KEYS: {unknown}"
        expected = breakdown_colours(names)
        drawn: dict[str, tuple[int, int, int]] = {}
        for trace in chart["traces"]:
            key = trace["name"]
            fills = {rgb(f) for f in chart["bars"].get(key, [])}
            swatches = {rgb(f) for f in chart["legend"].get(key, [])}
            assert len(fills) == 1, f"{where}: {key}'s bars are drawn in {len(fills)} colours: {fills}"
            assert swatches == fills, f"{where}: {key}'s legend swatch {swatches} is not its bars' colour {fills}"
            (drawn[key],) = fills
            assert trace["colour"] is not None and rgb(trace["colour"]) == drawn[key], where
            assert drawn[key] == rgb(expected[key]) == rgb(BREAKDOWN_COLOURS[key]), \
                f"{where}: {key} drawn {drawn[key]}, studies.colours gives {BREAKDOWN_COLOURS[key]}"
        shared = {c: [k for k in drawn if drawn[k] == c] for c in set(drawn.values())}
        clashes = {c: ks for c, ks in shared.items() if len(ks) > 1}
        assert not clashes, f"{where}: keys share a colour: {clashes}"
        for key, colour in drawn.items():  # the same key has the same colour in every chart
            assert seen.setdefault(key, colour) == colour, f"{key}: {seen[key]} in one chart, {colour} in another"
    return seen


def check(html_path: Path, tmp_path: Path, min_plots: int, min_breakdowns: int) -> dict[str, tuple[int, int, int]]:
    expected = html_path.read_text(encoding="utf-8").count("<div class='plot'>")  # figures the page should draw
    assert expected >= min_plots
    dom, shot = render(html_path, tmp_path)
    m = re.search(r"errors=(\d+);plots=(\d+);divs=(\d+);msg=(.*?)</pre>", dom, re.S)
    assert m, "the probe did not run (JavaScript did not execute)"
    errors, plots, divs = int(m.group(1)), int(m.group(2)), int(m.group(3))
    assert errors == 0, m.group(4)
    assert divs == expected and plots >= expected  # every figure drawn (plotly adds one or more svg layers)
    assert shot.exists() and png_distinct_bytes(shot) > 32
    c = re.search(r"<pre id=\"colours\">(.*?)</pre>", dom, re.S)
    assert c, "the colour probe did not run"
    text = html.unescape(c.group(1))
    assert not text.startswith("ERR"), text
    drawn = json.loads(text)
    assert len(drawn) == expected
    return check_breakdown_colours(drawn, min_breakdowns)


def test_breakdown_colours_are_distinct_and_stable() -> None:
    """The mapping itself (no browser): known keys keep their colours, every colour of a chart is distinct
    (known keys, unknown ones and more unknown keys than the palette has spare colours)."""
    assert len(set(BREAKDOWN_COLOURS.values())) == len(BREAKDOWN_COLOURS)
    keys = [*BREAKDOWN_COLOURS, *(f"compute.future{i}" for i in range(40))]
    colours = breakdown_colours(keys)
    assert list(colours) == keys and len({rgb(c) for c in colours.values()}) == len(keys)
    assert all(colours[k] == BREAKDOWN_COLOURS[k] for k in BREAKDOWN_COLOURS)
    assert breakdown_colours(reversed(keys)) == colours  # order-independent
    alone = breakdown_colours(["compute.future0", "comm.a2a"])
    assert alone["compute.future0"] not in BREAKDOWN_COLOURS.values()


def test_seed_report_renders(tmp_path: Path) -> None:
    browser()
    path, rows = write_seed_report(tmp_path / "seed")
    drawn = check(path, tmp_path, min_plots=6, min_breakdowns=2)  # one breakdown chart per model
    assert set(drawn) == {k for r in rows for k in r.prediction.breakdown}


def test_capacity_report_renders(tmp_path: Path) -> None:
    browser()
    spec = spec_from_mapping({
        "capacity": {"price_per_gpu_hour": 4.0},
        "search": {"tp": [1], "pp": [1, 2], "schedules": ["1f1b"], "ep": [8], "ac": ["full"], "micro_batch": [1]},
        "sweep": [{"models": ["deepseek-v3-16b"], "gpus": ["b200", "h100"], "gpu_counts": [64, 128],
                   "precisions": ["bf16"], "seq_len": 2048, "global_batch": 512}]})
    table = run_sweep(spec, tmp_path / "cap", workers=1)
    path = write_capacity_report(read_results(table), tmp_path / "cap" / "report.html")
    assert "now predict a step time other" not in path.read_text(encoding="utf-8")  # breakdowns re-predicted exactly
    drawn = check(path, tmp_path, min_plots=5, min_breakdowns=1)
    assert {"pipeline_bubble", "optimizer"} <= set(drawn) and any(k.startswith("compute.") for k in drawn)
