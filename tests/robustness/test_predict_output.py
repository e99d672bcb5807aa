"""What ``moesim predict`` prints: titles follow overrides, measured columns only for the measured settings,
the fitted row marked, GiB, notes for nonsense defaults, JSON provenance."""

from __future__ import annotations

import json

import pytest

from moesim import __version__
from moesim.predict_cmd import JSON_SCHEMA_VERSION, breakdown_groups
from tests.robustness.cli import run_cli


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    code, out, err = run_cli(["predict", *argv, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def test_seed_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["predict"], capsys)
    assert code == 0, err
    assert out.startswith("dsv3-671b-b200: ")
    # no row is fitted alone (the release's scalar comes from the joint calibration): each has its error
    assert "bf16 (standard EP)" in out and "[fitted]" not in out and "(fitted)" not in out
    for column in ("compute s", "a2a s", "bubble s", "mem GiB", "MFU"):
        assert column in out
    assert "mxfp8 grouped (standard EP)" in out  # the full name, not truncated


def test_overrides_change_the_title_and_drop_measured(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(["--gpus", "512"], capsys)
    assert "gpus=512" in data["title"] and "512 x b200" in data["title"]
    assert data["settings_match_measured"] == [False] * 4
    assert all("measured_tokens_per_s_per_gpu" not in p for p in data["predictions"])
    assert all("[fitted]" not in p["name"] for p in data["predictions"])
    code, out, _ = run_cli(["predict", "--gpus", "512"], capsys)
    assert "measured columns dropped" in out


def test_override_equal_to_a_variant_keeps_that_comparison(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(["--ep-backend", "deepep"], capsys)
    assert data["settings_match_measured"] == [False, True, True, False]
    assert data["predictions"][1]["measured_tokens_per_s_per_gpu"] == 859


def test_json_schema_and_provenance(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json([], capsys)
    assert data["schema_version"] == JSON_SCHEMA_VERSION
    assert data["moesim_version"] == __version__
    prov = data["provenance"]
    assert prov["scenario"] == "dsv3-671b-b200" and prov["stack"]["name"] == "torchtitan"
    assert prov["calibration"].startswith("built-in")
    assert prov["fitted_variants"] == []


def test_ep_one_on_many_experts_is_noted(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(["--model", "deepseek-v3-671b", "--gpus", "256"], capsys)
    assert any("ep defaults to 1" in n and "256 experts" in n for n in data["notes"])
    assert not _json(["--model", "deepseek-v3-671b", "--gpus", "256", "--ep", "32"], capsys)["notes"]


def test_interleaved_without_vpp_takes_two_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(["--model", "deepseek-v3-16b", "--gpus", "16", "--ep", "8", "--pp", "2",
                  "--pp-schedule", "interleaved-1f1b"], capsys)
    assert data["predictions"][0]["plan"]["vpp"] == 2
    assert any("interleaved-1f1b without --vpp" in n for n in data["notes"])


def test_does_not_fit_is_printed_beside_the_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["predict", "--model", "deepseek-v3-671b", "--gpus", "16", "--ep", "16"], capsys)
    assert code == 0, err
    assert "(does not fit)" in out and "does not fit in memory" in out


def test_breakdown_groups_cover_every_key() -> None:
    groups = breakdown_groups({"compute.x": 1.0, "comm.a2a": 2.0, "comm.a2a_count_exchange": 0.5, "comm.fsdp": 0.25,
                               "pipeline_bubble": 0.125, "host_sync": 0.0625, "optimizer": 0.03125})
    assert groups == {"compute": 1.0, "a2a": 2.5, "other comm": 0.25, "bubble": 0.125, "other": 0.09375}
