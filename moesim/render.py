"""Text tables for the terminal, rendered by ``rich``: no fixed-width f-strings, no truncated names.

>>> print(render_table(["variant", "tok/s"], [["a long variant name", "651.0"]], title="demo", align="lr"))
demo
<BLANKLINE>
 variant               tok/s
─────────────────────────────
 a long variant name   651.0
<BLANKLINE>
"""

from __future__ import annotations

import io
from collections.abc import Sequence

__all__ = ["render_table"]


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    title: str = "",
    notes: Sequence[str] = (),
    align: str = "",
    width: int = 400,
) -> str:
    """A plain-text table (no colour codes): ``align`` gives one letter per column, ``l`` or ``r``
    (default: the first column left, the rest right). Cells never wrap or truncate; ``notes`` follow
    the table, one per line."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    align = align or "l" + "r" * (len(headers) - 1)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=True)
    for header, a in zip(headers, align, strict=True):
        table.add_column(header, justify="right" if a == "r" else "left", no_wrap=True, overflow="ignore")
    for row in rows:
        table.add_row(*row)
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False, highlight=False,
                      emoji=False, markup=False, soft_wrap=True)
    if title:
        console.print(title)
        console.print()
    console.print(table)
    for note in notes:
        console.print(note)
    lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
    return "\n".join(lines) + "\n"
