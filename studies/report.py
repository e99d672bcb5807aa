"""Self-contained HTML reports: plotly figures with plotly.js inlined once, so the page opens offline.

>>> import plotly.graph_objects as go
>>> html = render_html("t", [Section("a", "text", [go.Figure(go.Bar(x=[1], y=[2]))])])
>>> html.count("<script") >= 2 and "<script src=" not in html
True
"""

from __future__ import annotations

import html as _html
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.fileio import write_atomic

__all__ = ["Section", "render_html", "write_report", "table_html", "ensure_dir", "check_report_path"]


@dataclass
class Section:
    """A heading, a paragraph (plain text, escaped) and figures (plotly) and tables (pre-rendered HTML)."""

    title: str
    text: str = ""
    figures: list[Any] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)


def table_html(header: list[str], rows: list[list[Any]]) -> str:
    """A plain HTML table (values escaped)."""
    head = "".join(f"<th>{_html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_CSS = """body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px;color:#222}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:0.85em;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}p{line-height:1.4}.plot{margin:8px 0}"""


def render_html(title: str, sections: list[Section], intro: str = "") -> str:
    """The page: plotly.js inlined in the head (once), every figure a div with its own script."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_html.escape(title)}</title>",
             f"<style>{_CSS}</style><script type='text/javascript'>{get_plotlyjs()}</script></head><body>",
             f"<h1>{_html.escape(title)}</h1>"]
    if intro:
        parts.append(f"<p>{_html.escape(intro)}</p>")
    n = 0
    for sec in sections:
        parts.append(f"<h2>{_html.escape(sec.title)}</h2>")
        if sec.text:
            parts.extend(f"<p>{_html.escape(par)}</p>" for par in sec.text.split("\n\n"))
        parts.extend(sec.tables)
        for fig in sec.figures:
            n += 1
            parts.append("<div class='plot'>" + pio.to_html(fig, include_plotlyjs=False, full_html=False,
                                                             div_id=f"plot{n}", config={"responsive": True})
                         + "</div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def ensure_dir(path: str | Path) -> Path:
    """Create the output folder ``path`` (and parents); a folder that cannot be made is a ConfigError."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--out {out}: cannot create the folder: {err.strerror}") from None
    if not out.is_dir():
        raise ConfigError(f"--out {out}: not a folder")
    return out


def check_report_path(path: str | Path) -> None:
    """Refuse, before any work, a report file inside an output folder that exists and is not a regular file (a
    folder, a FIFO, a device): the report is written there last, after a sweep that may take hours."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as err:
        raise ConfigError(f"{path}: cannot write the report there: {err.strerror or err}") from None
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{path}: not a regular file; refusing to write the report there (use another --out "
                          "folder or --no-report)")


def write_report(path: str | Path, title: str, sections: list[Section], intro: str = "") -> Path:
    """Render and write the report atomically; returns its path."""
    path = Path(path)
    write_atomic(path, render_html(title, sections, intro))
    return path
