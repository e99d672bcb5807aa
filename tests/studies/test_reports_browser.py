"""The HTML reports render in headless Chromium: no JavaScript errors, every plot drawn, a screenshot that
is not blank. Needs Debian's ``chromium`` (``.ci/run`` installs it; outside CI the test skips without it)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from studies.capacity import read_results, run_sweep
from studies.capacity_report import write_capacity_report
from studies.capacity_spec import spec_from_mapping
from studies.seed import write_seed_report

pytestmark = pytest.mark.browser

CHROMIUM = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
# Counts uncaught errors and console.error calls, and how many plotly plots finished drawing.
PROBE = """<script>window.__errors=[];window.addEventListener('error',function(e){window.__errors.push(String(e.message))});
var _ce=console.error;console.error=function(){window.__errors.push(Array.from(arguments).join(' '));_ce.apply(console,arguments)};
window.addEventListener('load',function(){setTimeout(function(){var d=document.createElement('pre');d.id='probe';
d.textContent='errors='+window.__errors.length+';plots='+document.querySelectorAll('.js-plotly-plot .main-svg').length+
';divs='+document.querySelectorAll('.js-plotly-plot').length+';msg='+window.__errors.join('|');document.body.appendChild(d)},1500)});</script>"""


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


def check(html_path: Path, tmp_path: Path, min_plots: int) -> None:
    expected = html_path.read_text(encoding="utf-8").count("<div class='plot'>")  # figures the page should draw
    assert expected >= min_plots
    dom, shot = render(html_path, tmp_path)
    m = re.search(r"errors=(\d+);plots=(\d+);divs=(\d+);msg=(.*?)</pre>", dom, re.S)
    assert m, "the probe did not run (JavaScript did not execute)"
    errors, plots, divs = int(m.group(1)), int(m.group(2)), int(m.group(3))
    assert errors == 0, m.group(4)
    assert divs == expected and plots >= expected  # every figure drawn (plotly adds one or more svg layers)
    assert shot.exists() and png_distinct_bytes(shot) > 32


def test_seed_report_renders(tmp_path: Path) -> None:
    browser()
    path, _ = write_seed_report(tmp_path / "seed")
    check(path, tmp_path, min_plots=6)


def test_capacity_report_renders(tmp_path: Path) -> None:
    browser()
    spec = spec_from_mapping({
        "capacity": {"price_per_gpu_hour": 4.0},
        "search": {"tp": [1], "pp": [1, 2], "schedules": ["1f1b"], "ep": [8], "ac": ["full"], "micro_batch": [1]},
        "sweep": [{"models": ["deepseek-v3-16b"], "gpus": ["b200", "h100"], "gpu_counts": [64, 128],
                   "precisions": ["bf16"], "seq_len": 2048, "global_batch": 512}]})
    table = run_sweep(spec, tmp_path / "cap", workers=1)
    path = write_capacity_report(read_results(table), tmp_path / "cap" / "report.html")
    check(path, tmp_path, min_plots=5)
