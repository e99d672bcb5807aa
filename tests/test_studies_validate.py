"""``python -m studies validate``: predicted vs measured, exit codes by outcome."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from studies.validate import validate_scenarios


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "studies", "validate", *args], capture_output=True, text=True,
                          timeout=120)


def test_seed_holdouts_within_ten_percent() -> None:
    rows = {r.variant: r for r in validate_scenarios(["dsv3-671b-b200"])}
    assert rows["bf16 (standard EP)"].fitted
    for name in ("bf16 + DeepEP", "mxfp8 grouped + DeepEP"):
        row = rows[name]
        assert not row.fitted and row.within


def test_exit_code_reports_a_miss() -> None:
    assert run().returncode == 0
    tight = run("--tolerance", "0.001", "--json")
    assert tight.returncode == 1
    rows = json.loads(tight.stdout)["rows"]
    assert [r["within"] for r in rows] == [True, False, False]


@pytest.mark.parametrize("args", [("no-such-scenario",), ("--tolerance", "-1")])
def test_bad_input_exits_2(args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
