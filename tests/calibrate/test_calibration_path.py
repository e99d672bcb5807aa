"""One path from a calibration to a prediction's inputs (:func:`sim.calibration.calibrated_inputs`): every
cost table a calibration carries changes the prediction, and every table of the schema is either a cost
or named as information. A table that ``predict`` silently dropped would fail here."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from calibrate.traced_plan import predicted_pair
from sim.calibration import (
    _TOP,
    COST_TABLES,
    INFORMATION_TABLES,
    bundled_path,
    parse_calibration,
)

METADATA = ("schema", "version", "name", "gpu", "provenance")


def _doc() -> dict[str, Any]:
    with open(bundled_path("h800-deepseek-trace"), encoding="utf-8") as f:
        return json.load(f)


def _span(doc: dict[str, Any]) -> tuple[float, float]:
    w = predicted_pair(parse_calibration(json.dumps(doc), "test"), layers=2)
    return w.span_s, w.compute_busy_s


def test_every_schema_table_is_a_cost_or_named_information() -> None:
    assert set(_TOP) == set(METADATA) | set(COST_TABLES) | set(INFORMATION_TABLES)
    assert not set(COST_TABLES) & set(INFORMATION_TABLES)


# How to perturb each cost table (the bundled trace calibration lacks some: they are added).
PERTURB = {
    "gemm_eff": lambda d: d["gemm_eff"]["fp8"].update(values=[v * 0.5 for v in d["gemm_eff"]["fp8"]["values"]]),
    "grouped_gemm_eff": lambda d: d["grouped_gemm_eff"]["fp8_wgrad"].update(
        values=[v * 0.5 for v in d["grouped_gemm_eff"]["fp8_wgrad"]["values"]]),
    "attn_fwd_eff": lambda d: d.update(attn_fwd_eff=d["attn_fwd_eff"] * 0.5),
    "attn_bwd_eff": lambda d: d.update(attn_bwd_eff=d["attn_bwd_eff"] * 0.5),
    "attn_eff": lambda d: (d.pop("attn_fwd_eff"), d.update(attn_eff={"fwd": {"sizes": [1e9, 1e12], "values": [0.05, 0.1]}})),
    "mem_bw_eff": lambda d: d.update(mem_bw_eff=d["mem_bw_eff"] * 0.5),
    "quantize_bw_eff": lambda d: d.update(quantize_bw_eff=d["quantize_bw_eff"] * 0.5),
    "comm": lambda d: d["comm"].update(overlap_kernel_slowdown=d["comm"]["overlap_kernel_slowdown"] * 2),
    "stack_efficiency": lambda d: d["stack_efficiency"]["sm90"].update({"gemm.wgrad": 0.3}),
    "launch_overhead_s": lambda d: d.update(launch_overhead_s=200e-6),
    "host_sync_s": lambda d: d.update(host_sync_s=5e-3),
}


def test_every_cost_table_has_a_perturbation() -> None:
    assert set(PERTURB) == set(COST_TABLES)


@pytest.mark.parametrize("table", COST_TABLES)
def test_a_cost_table_changes_the_prediction(table: str) -> None:
    base = _doc()
    changed = copy.deepcopy(base)
    PERTURB[table](changed)
    assert _span(changed) != _span(base), f"{table} did not change the predicted window: it is dropped"
