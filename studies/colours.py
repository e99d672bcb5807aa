"""One colour per step-time breakdown key, the same in every chart of every report; one colour per GPU type
and one marker symbol and line dash per model for the charts whose series are model x GPU pairs.

The keys are the categories of :func:`sim.predict.breakdown.breakdown` (``compute.<op class>``, the
exposed communication kinds ``comm.*``, ``host_sync``, ``pipeline_bubble``, ``optimizer``). Each known
key has a fixed colour (:data:`BREAKDOWN_COLOURS`) from a hard-coded qualitative palette
(:data:`PALETTE`: plotly's Dark24 then Light24, 48 distinct colours, copied here so that colours do not
move with plotly's version). A key the map does not know (a category added to the simulator later) gets
a colour from the rest of the palette, picked by a hash of its name and probed past any colour the chart
already uses, so it is deterministic and never shares a colour with another key of the same chart, nor
with any known key; once that rest is used up, further keys get generated colours outside the palette.

>>> colours = breakdown_colours(["compute.attn.core", "comm.a2a", "compute.new_op"])
>>> colours["comm.a2a"] == BREAKDOWN_COLOURS["comm.a2a"]
True
>>> colours["compute.new_op"] in BREAKDOWN_COLOURS.values()
False
>>> len(set(colours.values())) == len(colours)
True
"""

from __future__ import annotations

import colorsys
import zlib
from collections.abc import Iterable, Mapping
from types import MappingProxyType

__all__ = ["BREAKDOWN_COLOURS", "BREAKDOWN_KEYS", "GPU_COLOURS", "MODEL_DASHES", "MODEL_SYMBOLS", "PALETTE",
           "breakdown_colours", "gpu_colours", "model_marks"]

#: plotly's qualitative Dark24, then Light24 with its most saturated colours first (the pale ones last).
PALETTE: tuple[str, ...] = (
    # Dark24
    "#2E91E5", "#E15F99", "#1CA71C", "#FB0D0D", "#DA16FF", "#222A2A", "#B68100", "#750D86",
    "#EB663B", "#511CFB", "#00A08B", "#FB00D1", "#FC0080", "#B2828D", "#6C7C32", "#778AAE",
    "#862A16", "#A777F1", "#620042", "#1616A7", "#DA60CA", "#6C4516", "#0D2A63", "#AF0038",
    # Light24
    "#FF9616", "#6A76FC", "#00B5F7", "#FD3216", "#479B55", "#DC587D", "#D626FF", "#6E899C",
    "#B68E00", "#FF0092", "#86CE00", "#BC7196", "#7E7DCD", "#FC6955", "#E48F72", "#00FE35",
    "#FE00CE", "#0DF9FF", "#F6F926", "#EEA6FB", "#22FFA7", "#FED4C4", "#C9FBE5", "#E3EE9E",
)

#: Every category the simulator's breakdown emits, in the order they take :data:`PALETTE`'s colours
#: (sorted, the order the charts stack them, so neighbouring segments differ strongly). Append a new
#: category at the end: the keys already here keep their colours.
BREAKDOWN_KEYS: tuple[str, ...] = (
    "comm.a2a", "comm.a2a_count_exchange", "comm.dp", "comm.fsdp", "comm.other", "comm.tp", "comm.wait",
    "compute.attn.core", "compute.attn.kv_proj", "compute.attn.norm", "compute.attn.o_proj",
    "compute.attn.q_proj", "compute.embed", "compute.loss", "compute.mlp.dense", "compute.moe.expert_gemm",
    "compute.moe.norm", "compute.moe.permute", "compute.moe.quantize", "compute.moe.router",
    "compute.moe.shared_expert", "compute.moe.unpermute", "compute.mtp.proj", "compute.wgrad",
    "host_sync", "optimizer", "pipeline_bubble", "comm.dp_once", "comm.dp_exposed", "straggler", "step_fixed",
    "host_issue",
)

#: The fixed colour of each known breakdown key (read-only).
BREAKDOWN_COLOURS: Mapping[str, str] = MappingProxyType(dict(zip(BREAKDOWN_KEYS, PALETTE)))

#: The palette's colours no known key holds: where unknown keys' colours come from first.
_SPARE: tuple[str, ...] = tuple(c for c in PALETTE if c not in set(BREAKDOWN_COLOURS.values()))

#: The golden ratio's fractional part: successive generated hues spread evenly round the colour wheel.
_GOLDEN = 0.6180339887498949


def _generated(n: int) -> str:
    """The ``n``-th generated colour (hex), for unknown keys once the spare palette is used up."""
    hue = (n * _GOLDEN) % 1.0
    light = (0.35, 0.5, 0.65)[n % 3]
    r, g, b = colorsys.hls_to_rgb(hue, light, 0.75)
    return f"#{round(r * 255):02X}{round(g * 255):02X}{round(b * 255):02X}"


def breakdown_colours(keys: Iterable[str]) -> dict[str, str]:
    """The colour of each of ``keys`` (the keys of one chart), in the order given, each distinct.

    A known key gets its :data:`BREAKDOWN_COLOURS` colour. Unknown keys, taken in sorted order, start at
    the spare colour their name hashes to (CRC-32) and take the first one from there that this chart does
    not use yet; past the spare colours, generated ones that clash with no palette colour.

    >>> breakdown_colours(["pipeline_bubble"]) == {"pipeline_bubble": BREAKDOWN_COLOURS["pipeline_bubble"]}
    True
    >>> many = breakdown_colours(f"compute.op{i}" for i in range(60))
    >>> len(set(many.values()))
    60
    """
    ordered = list(dict.fromkeys(keys))
    out = {k: BREAKDOWN_COLOURS[k] for k in ordered if k in BREAKDOWN_COLOURS}
    used = {c.upper() for c in out.values()}
    generated = 0
    for key in sorted(k for k in ordered if k not in out):
        start = zlib.crc32(key.encode("utf-8")) % len(_SPARE)
        colour = next((c for i in range(len(_SPARE)) if (c := _SPARE[(start + i) % len(_SPARE)]) not in used), None)
        while colour is None:
            candidate = _generated(generated)
            generated += 1
            if candidate not in used and candidate not in PALETTE:
                colour = candidate
        out[key] = colour
        used.add(colour)
    return {k: out[k] for k in ordered}


#: The fixed colour of each catalog GPU type in the capacity charts, far apart from each other (the GPU is
#: what a chart's reader compares; the model is told apart by :func:`model_marks`). Append new GPUs at the end.
GPU_COLOURS: Mapping[str, str] = MappingProxyType({
    "h100": "#2E91E5", "h200": "#1CA71C", "h800": "#750D86", "b200": "#FB0D0D", "gb200": "#FF9616",
    "b300": "#222A2A", "gb300": "#DA16FF",
})

#: Marker symbols (plotly names) and line dashes the models of a chart take, in the order of their names.
MODEL_SYMBOLS: tuple[str, ...] = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star",
                                  "triangle-down", "pentagon", "hexagon", "star-triangle-up", "hourglass")
MODEL_DASHES: tuple[str, ...] = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def gpu_colours(gpus: Iterable[str]) -> dict[str, str]:
    """The colour of each GPU type of a chart, each distinct: a catalog GPU keeps its :data:`GPU_COLOURS`
    colour in every chart; others take palette colours no GPU of the chart holds (as unknown breakdown keys).

    >>> gpu_colours(["gb200", "b200"]) == {"gb200": GPU_COLOURS["gb200"], "b200": GPU_COLOURS["b200"]}
    True
    >>> len(set(gpu_colours(["b200", "tpu-x", "tpu-y"]).values()))
    3
    """
    ordered = list(dict.fromkeys(gpus))
    out = {g: GPU_COLOURS[g] for g in ordered if g in GPU_COLOURS}
    used = {c.upper() for c in GPU_COLOURS.values()}
    spare = [c for c in PALETTE if c.upper() not in used]
    generated = 0
    for gpu in sorted(g for g in ordered if g not in out):
        start = zlib.crc32(gpu.encode("utf-8")) % len(spare)
        colour = next((c for i in range(len(spare)) if (c := spare[(start + i) % len(spare)]) not in used), None)
        while colour is None:
            candidate = _generated(generated)
            generated += 1
            if candidate not in used and candidate not in PALETTE:
                colour = candidate
        out[gpu] = colour
        used.add(colour.upper())
    return {g: out[g] for g in ordered}


def model_marks(models: Iterable[str]) -> dict[str, tuple[str, str]]:
    """``{model: (marker symbol, line dash)}`` for the models of a chart, in sorted order of their names,
    each pair distinct up to 72 models (past :data:`MODEL_SYMBOLS`, a symbol comes back with another dash).

    >>> model_marks(["b", "a"])
    {'b': ('square', 'dash'), 'a': ('circle', 'solid')}
    """
    ordered = list(dict.fromkeys(models))
    rank = {m: i for i, m in enumerate(sorted(ordered))}
    n = len(MODEL_SYMBOLS)
    return {m: (MODEL_SYMBOLS[rank[m] % n], MODEL_DASHES[(rank[m] % n + rank[m] // n) % len(MODEL_DASHES)])
            for m in ordered}
