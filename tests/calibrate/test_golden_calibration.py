"""Every number the calibrator fits and compares, pinned in ``tests/data/golden_outputs.json``: fits of
synthetic op-event traces, and DeepSeek's real H800 trace fitted and compared with its replay (in sample and
with a layer held out). ``python tests/golden_outputs.py --write`` regenerates them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from calibrate.synthetic import TRUE_COMM_BPS
from tests import golden_outputs as golden
from tests.shared_trace import TRACE, needs_trace


def _stored() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(golden.GOLDEN_FILE.read_text(encoding="utf-8"))
    return data


def _assert_same(stored: dict[str, Any], today: dict[str, Any]) -> None:
    assert set(today) <= set(stored), "cases changed: run `python tests/golden_outputs.py --write`"
    diffs = [d for name in today for d in golden.differences(stored[name], today[name], name)]
    assert not diffs, "calibrator outputs moved (if meant: `python tests/golden_outputs.py --write`):\n" + \
        "\n".join(diffs[:20])


def test_synthetic_fits_give_the_stored_tables() -> None:
    today = golden.calibrate_outputs(None)
    assert len(today) == 3
    _assert_same(_stored(), today)
    # a noiseless trace reads its communication rate back exactly; overlap slowdown lowers no fitted rate
    # it should not: only the overlapped half of the compute ran slower, so dense efficiencies drop, not rise
    exact, slow = today["calibrate:synthetic-exact"], today["calibrate:synthetic-slowdown"]
    assert exact["comm_rates"]["a2a.dispatch"]["bytes_per_s"] == pytest.approx(TRUE_COMM_BPS, rel=1e-6)
    assert all(s < e for s, e in zip(slow["gemm_eff"]["bf16"]["values"], exact["gemm_eff"]["bf16"]["values"]))


@needs_trace
def test_deepseek_trace_fit_and_comparisons_give_the_stored_numbers() -> None:
    today = dict(golden.trace_calibration_outputs(TRACE))
    assert set(today) == {"calibrate:deepseek-trace", "compare:deepseek-trace", "compare:deepseek-trace-layer1-held-out"}
    _assert_same(_stored(), golden._json(today))
