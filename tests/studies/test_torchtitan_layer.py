"""TorchTitan's MoE layer alone (TorchAO's benchmark): the layer's MXFP8 speedup, and the file's strictness."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.errors import ConfigError
from studies.torchtitan_layer import (
    default_path,
    layer_markdown,
    layer_rows,
    load_layer_cells,
    speedups,
)


def test_the_layers_mxfp8_speedup_is_predicted_within_three_percent() -> None:
    s = speedups()
    assert s["measured"] == pytest.approx(92.032 / 80.182)
    assert s["predicted"] == pytest.approx(s["measured"], rel=0.03)


def test_each_cell_runs_its_shared_expert_and_is_reported_against_the_kernel_rates() -> None:
    cells = load_layer_cells()
    assert {c.spec.n_shared_experts for c in cells} == {1} and {c.spec.gpus for c in cells} == {1}
    rows = layer_rows()
    assert all(0 < r["predicted_ms"] and r["ratio"] == pytest.approx(r["predicted_ms"] / r["measured_ms"]) for r in rows)
    table = [line for line in layer_markdown() if line.startswith("| torchao-")]
    assert len(table) == 2


def test_an_unknown_key_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "cells.toml"
    bad.write_text(default_path().read_text().replace("top_k = 1", "top_k = 1\nwarp_size = 32", 1))
    with pytest.raises(ConfigError, match="unknown key 'warp_size'"):
        load_layer_cells(bad)
