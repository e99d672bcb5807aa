"""Single-MoE-layer cells: measured forward / backward times of one MoE layer, and the step's cost path's
prediction of each (:func:`sim.layer_check.predict_moe_layer`).

The shipped cells (``studies/data/moe_layer_cells.toml``, format in its header) are Megatron-LM's MoE
layer regression baselines on 8 H100 (measured-runs.md s8). :func:`load_cells` reads a file strictly: an
unknown, missing or mistyped key, a duplicate id, a kind other than ``moe-layer`` or a GPU that is not the
cluster's is a :class:`~sim.errors.ConfigError` naming the cell, the key and the file.
:func:`layer_cell_rows` gives one row per cell, as ``moesim validate --json`` lists them.

``python -m studies.layer_cells [--parts]`` prints the cells, their errors (and each prediction's per-op
split).

>>> rows = layer_cell_rows()
>>> len(rows), rows[0]["kind"], sorted(rows[0]["measured"])
(12, 'moe-layer', ['backward_ms', 'forward_ms'])
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sim.catalog import load_cluster
from sim.errors import ConfigError, MoesimError
from sim.layer_check import MoELayerCell, layer_plan, predict_moe_layer
from sim.loaders import read_table_array, refuse_duplicate_ids
from sim.stacks import load_stack

__all__ = ["MAX_FITTED", "LayerCell", "cell_errors", "default_cells_path", "format_rows", "layer_cell_rows", "load_cells", "main",
           "typed_field", "within"]

#: at most this many cells may have a parameter fitted to them (the rest are the test)
MAX_FITTED = 2
KIND = "moe-layer"

_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "id": str, "kind": str, "model": str, "dim": int, "moe_inter_dim": int, "n_experts": int, "top_k": int,
    "gpu": str, "gpus": int, "cluster": str, "ep": int, "tokens_per_gpu": int, "ep_backend": str,
    "precision": str, "stack": str, "forward_ms": (int, float), "backward_ms": (int, float), "source": str,
    "fitted": bool,
}
_OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "n_group": int, "topk_group": int, "score_func": str, "ep_sms": int, "notes": str,
}


@dataclass(frozen=True)
class LayerCell:
    """One measured single-MoE-layer cell: what ran (``spec``, for :mod:`sim.layer_check`) and what was
    measured (mean milliseconds of the forward and of the backward)."""

    spec: MoELayerCell
    model: str
    gpu: str
    forward_ms: float
    backward_ms: float
    source: str
    fitted: bool = False
    notes: str = ""

    @property
    def id(self) -> str:
        return self.spec.id


def default_cells_path() -> Path:
    """The shipped cells file."""
    return Path(str(resources.files("studies").joinpath("data", "moe_layer_cells.toml")))


def typed_field(where: str, key: str, value: Any, want: type | tuple[type, ...]) -> Any:
    """``value`` if it is of type ``want`` (a bool is not an int), else a :class:`ConfigError` naming ``key``."""
    ok = isinstance(value, want) and not (isinstance(value, bool) and want is not bool)
    if not ok:
        names = " or ".join(t.__name__ for t in (want if isinstance(want, tuple) else (want,)))
        raise ConfigError(f"{where}: {key} must be {names}, got {value!r}")
    return value


def _cell(entry: Any, index: int, path: Path) -> LayerCell:
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: cell {index + 1} must be a table, got {entry!r}")
    name = entry.get("id")
    where = f"{path}: cell {name!r}" if isinstance(name, str) else f"{path}: cell {index + 1}"
    unknown = sorted(set(entry) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join([*_REQUIRED, *_OPTIONAL])})")
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise ConfigError(f"{where}: missing key {missing[0]!r}")
    v = {k: typed_field(where, k, entry[k], t) for k, t in (*_REQUIRED.items(), *_OPTIONAL.items()) if k in entry}
    if v["kind"] != KIND:
        raise ConfigError(f"{where}: kind must be {KIND!r}, got {v['kind']!r}")
    for key in ("forward_ms", "backward_ms"):
        if not 0 < v[key] < 1e6:
            raise ConfigError(f"{where}: {key} must be a positive time in ms, got {v[key]!r}")
    for key in ("dim", "moe_inter_dim", "n_experts", "top_k", "gpus", "ep", "tokens_per_gpu"):
        if v[key] < 1:
            raise ConfigError(f"{where}: {key} must be positive, got {v[key]}")
    try:
        cluster = load_cluster(v["cluster"], n_gpus=v["gpus"])
    except MoesimError as err:
        raise ConfigError(f"{where}: {err}") from None
    if cluster.gpu.name != v["gpu"]:
        raise ConfigError(f"{where}: gpu {v['gpu']!r} is not cluster {v['cluster']!r}'s ({cluster.gpu.name!r})")
    spec = MoELayerCell(
        id=v["id"], dim=v["dim"], moe_inter_dim=v["moe_inter_dim"], n_experts=v["n_experts"], top_k=v["top_k"],
        cluster=v["cluster"], gpus=v["gpus"], ep=v["ep"], tokens_per_gpu=v["tokens_per_gpu"],
        ep_backend=v["ep_backend"], precision=v["precision"], stack=v["stack"], n_group=v.get("n_group", 1),
        topk_group=v.get("topk_group", 1), score_func=v.get("score_func", "softmax"), ep_sms=v.get("ep_sms", 0),
    )
    try:  # the plan's and the stack's own checks (precision, backend, SMs, degrees), at load time
        layer_plan(spec)
        load_stack(spec.stack)
    except MoesimError as err:
        raise ConfigError(f"{where}: {err}") from None
    return LayerCell(spec, v["model"], v["gpu"], float(v["forward_ms"]), float(v["backward_ms"]), v["source"],
                     v["fitted"], v.get("notes", ""))


def load_cells(path: str | Path | None = None) -> list[LayerCell]:
    """The cells of ``path`` (None: the shipped file), checked strictly (see the module docstring)."""
    path = Path(path) if path is not None else default_cells_path()
    cells = [_cell(e, i, path) for i, e in enumerate(read_table_array(path, "cell"))]
    refuse_duplicate_ids(str(path), "cell", [c.id for c in cells])
    fitted = [c.id for c in cells if c.fitted]
    if len(fitted) > MAX_FITTED:
        raise ConfigError(f"{path}: {len(fitted)} cells are fitted ({', '.join(fitted)}); at most {MAX_FITTED}")
    return cells


def layer_cell_rows(path: str | Path | None = None) -> list[dict[str, Any]]:
    """One row per cell: ``{"id", "kind": "moe-layer", "measured": {"forward_ms", "backward_ms"},
    "predicted": {"forward_ms", "backward_ms"}, "fitted"}``; a cell the simulator cannot run raises its
    :class:`~sim.errors.MoesimError` naming the cell."""
    rows: list[dict[str, Any]] = []
    for c in load_cells(path):
        try:
            p = predict_moe_layer(c.spec)
        except MoesimError as err:
            raise type(err)(f"layer cell {c.id!r}: {err}") from None
        rows.append({
            "id": c.id, "kind": KIND,
            "measured": {"forward_ms": c.forward_ms, "backward_ms": c.backward_ms},
            "predicted": {"forward_ms": p.forward_ms, "backward_ms": p.backward_ms},
            "fitted": c.fitted,
        })
    return rows


def cell_errors(row: dict[str, Any]) -> tuple[float, float]:
    """(forward, backward) relative errors of a :func:`layer_cell_rows` row: predicted / measured - 1."""
    m, p = row["measured"], row["predicted"]
    return p["forward_ms"] / m["forward_ms"] - 1, p["backward_ms"] / m["backward_ms"] - 1


def within(rows: list[dict[str, Any]], limit: float = 0.10) -> int:
    """Cells not fitted whose forward and backward errors are both within ``limit``."""
    return sum(1 for r in rows if not r["fitted"] and max(map(abs, cell_errors(r))) <= limit)


def format_rows(rows: list[dict[str, Any]], parts: dict[str, tuple[dict[str, float], dict[str, float]]] | None = None
                ) -> str:
    """A table of :func:`layer_cell_rows` (ms and errors) with the mean and largest absolute errors of the
    cells not fitted; ``parts``: per cell id, the forward and backward per-op seconds to list under it."""
    lines = [f"{'cell':46s} {'fwd pred':>8s} {'meas':>7s} {'err':>7s}  {'bwd pred':>8s} {'meas':>7s} {'err':>7s}"]
    held: list[float] = []
    for r in rows:
        f, b = cell_errors(r)
        if not r["fitted"]:
            held += [abs(f), abs(b)]
        m, p = r["measured"], r["predicted"]
        lines.append(f"{r['id']:46s} {p['forward_ms']:8.3f} {m['forward_ms']:7.3f} {f:+7.1%}  "
                     f"{p['backward_ms']:8.3f} {m['backward_ms']:7.3f} {b:+7.1%}{'  (fitted)' if r['fitted'] else ''}")
        for label, split in zip(("fwd", "bwd"), (parts or {}).get(r["id"], ())):
            lines.append(f"    {label}: " + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in split.items()))
    if held:
        lines.append(f"not fitted: mean |error| {sum(held) / len(held):.1%}, max {max(held):.1%}; "
                     f"{within(rows)} of {sum(not r['fitted'] for r in rows)} cells within 10% forward and backward")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the shipped cells' predictions and errors (``--parts``: with each prediction's per-op split)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    show = "--parts" in args
    rows = layer_cell_rows()
    parts = None
    if show:
        parts = {}
        for c in load_cells():
            p = predict_moe_layer(c.spec)
            parts[c.id] = (p.forward_parts, p.backward_parts)
    print(format_rows(rows, parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
