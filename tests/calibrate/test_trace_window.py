"""Issue 14, Must show 1: DeepSeek's traced pair predicted from the bundled calibration alone (the path
``moesim predict`` takes), reported by ``moesim calibrate compare --json`` as ``window.measured`` and
``window.predicted``: compute busy within 5% of the trace (the memory-bound rates are fitted from it:
calibrate/memory_fit.py), exposed communication within 3 ms (each all-to-all issued before the other
chunk's compute it runs under: sim.predict.layers._pair_order), span within 5%."""

from __future__ import annotations

import json

import pytest

from moesim.cli import main
from tests.shared_trace import NEEDS_TRACE, TRACE

pytestmark = NEEDS_TRACE
KEYS = ("compute_busy_s", "comm_busy_s", "exposed_comm_s", "span_s")


@pytest.fixture(scope="module")
def window() -> dict[str, dict[str, float]]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["calibrate", "compare", str(TRACE), "--calibration", "h800-deepseek-trace", "--json"])
    assert rc == 0
    return json.loads(out.getvalue())["window"]


def test_the_window_is_reported_measured_and_predicted(window: dict[str, dict[str, float]]) -> None:
    for side in ("measured", "predicted", "replayed"):
        assert set(window[side]) == set(KEYS), side
    m = window["measured"]
    assert m["span_s"] == pytest.approx(0.12901, abs=1e-4)  # the trace's own window
    assert m["exposed_comm_s"] == pytest.approx(0.00422, abs=2e-4)
    assert m["compute_busy_s"] > m["comm_busy_s"]  # the real pair is compute-bound


def test_predicted_compute_busy_within_5_percent(window: dict[str, dict[str, float]]) -> None:
    m, p = window["measured"], window["predicted"]
    assert abs(p["compute_busy_s"] / m["compute_busy_s"] - 1) <= 0.05


def test_predicted_exposed_communication_within_3_ms(window: dict[str, dict[str, float]]) -> None:
    assert abs(window["predicted"]["exposed_comm_s"] - window["measured"]["exposed_comm_s"]) <= 3e-3


def test_predicted_span_within_5_percent(window: dict[str, dict[str, float]]) -> None:
    assert abs(window["predicted"]["span_s"] / window["measured"]["span_s"] - 1) <= 0.05
