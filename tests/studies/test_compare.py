"""``moesim compare``: the compare file's strict reader, the JSON it prints, and the ratio intervals
(:mod:`studies.compare`, :mod:`moesim.compare_cmd`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from moesim.cli import main
from moesim.compare_cmd import compare
from studies.compare import (
    MIN_PAIRS,
    MeasuredPoint,
    load_compare,
    measured_points,
    pair_interval,
    ratio_interval,
    ratio_residuals,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "b200-vs-gb200-qwen3.toml"

# The debug model on two GPU types and two GPU counts: fast, and every kind of change at once.
DEBUG = """
[scenario]
name = "debug-compare"
model = "debug"
[base]
ep = 4
seq_len = 512
global_batch = 32
[[variant]]
name = "8 x B200"
gpu = "b200"
gpus = 8
[[variant]]
name = "16 x H100"
gpu = "h100"
cluster = "hgx-h100"
gpus = 16
[variant.plan]
ep = 8
[[variant]]
name = "8 x B200 again"
gpu = "b200"
gpus = 8
[[variant]]
name = "8 x B200, 200G NIC"
gpu = "b200"
gpus = 8
nic_gbps = 200
"""


def _strict_json(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise AssertionError(f"non-finite number {token} in JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def points() -> list[MeasuredPoint]:
    return measured_points()


@pytest.fixture(scope="module")
def example(points: list[MeasuredPoint]) -> dict[str, Any]:
    return compare(load_compare(str(EXAMPLE)), points)


@pytest.fixture(scope="module")
def debug(points: list[MeasuredPoint], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("compare") / "debug.toml"
    path.write_text(DEBUG, encoding="utf-8")
    return compare(load_compare(str(path)), points)


# --- the file -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "names"), [
    ("[scenario]\nmodel = 'debug'\ngpus = 8\n[[variant]]\nname = 'a'\ngpu_count = 8\n", ["gpu_count", "variant 'a'"]),
    ("[scenario]\nmodel = 'debug'\ngpus = 8\nrack = 'x'\n[[variant]]\nname = 'a'\n", ["rack", "[scenario]"]),
    ("[scenario]\nmodel = 'debug'\ngpus = 8\n[extras]\n[[variant]]\nname = 'a'\n", ["extras"]),
    ("[scenario]\nmodel = 'debug'\ngpus = 8\n[[variant]]\nname = 'a'\n[variant.plan]\nepp = 2\n", ["epp", "plan"]),
    ("[scenario]\nmodel = 'debug'\ngpus = 8\n[base]\ntp = 'two'\n[[variant]]\nname = 'a'\n", ["tp", "[base]"]),
    ("[scenario]\ngpus = 8\n[[variant]]\nname = 'a'\n", ["needs model", "variant 'a'"]),
    ("[scenario]\nmodel = 'debug'\n[[variant]]\nname = 'a'\ngpus = 8.5\n", ["gpus", "8.5"]),
    ("[scenario]\nmodel = 'debug'\ngpus = 8\n[[variant]]\nname = 'a'\nnic_gbps = nan\n", ["nic_gbps", "nan"]),
    ("[scenario]\nmodel = 'debug'\ngpus = 8\n[[variant]]\nname = 'a'\n[[variant]]\nname = 'a'\n", ["repeated: a"]),
    ("[scenario]\nmodel = 'debug'\ngpus = 8\n", ["[[variant]]"]),
    ("[scenario]\nmodel = 'debug'\ngpus = 8\n[[variant]]\ngpu = 'b200'\n", ["needs a name"]),
])
def test_bad_files_exit_2_naming_the_field_and_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        text: str, names: list[str]) -> None:
    path = tmp_path / "bad-compare.toml"
    path.write_text(text, encoding="utf-8")
    assert main(["compare", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert str(path) in err
    for name in names:
        assert name in err


def test_a_variant_that_cannot_run_exits_2_naming_the_variant(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[scenario]\nmodel = 'debug'\ngpus = 8\n[[variant]]\nname = 'a'\n"
                    "[[variant]]\nname = 'odd'\n[variant.plan]\ntp = 3\n", encoding="utf-8")
    assert main(["compare", str(path)]) == 2
    err = capsys.readouterr().err
    assert "variant 'odd'" in err and "tp (3)" in err and len(err.strip().splitlines()) == 1


def test_missing_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "no-such-compare.toml"]) == 2
    assert "no-such-compare.toml" in capsys.readouterr().err


def test_the_file_takes_defaults_from_scenario_and_base() -> None:
    spec = load_compare(str(EXAMPLE))
    b200, gb200 = spec.variants
    assert (b200.model, b200.gpus, b200.stack, b200.gpu) == ("qwen3-235b-a22b", 256, "megatron-26.04", "b200")
    assert (gb200.gpu, gb200.cluster, gb200.plan["ep"], gb200.plan["vpp"]) == ("gb200", "gb200-nvl72", 32, 3)
    assert b200.plan["precision"] == gb200.plan["precision"] == "mxfp8"  # from [base]


def test_the_example_plans_are_the_measured_runs_plans() -> None:
    from studies.dataset import load_runs

    runs = {r.id: r for r in load_runs()}
    spec = load_compare(str(EXAMPLE))
    for variant, run_id in zip(spec.variants, ("mcore-26.04.01-qwen3-235b-256xb200",
                                               "mcore-26.04.01-qwen3-235b-256xgb200"), strict=True):
        run = runs[run_id]
        assert variant.plan == run.plan
        assert (variant.model, variant.gpu, variant.gpus, variant.cluster) == (run.model, run.gpu, run.gpus, run.cluster)
        assert variant.measured_tokens_per_s_per_gpu == run.measured_tokens_per_s_per_gpu


def test_the_fp8_attention_example_is_mlperfs_gb300_run_and_fp8_is_faster(points: list[MeasuredPoint]) -> None:
    """examples/gb300-fp8-attention.toml: its FP8 variant is the held-out MLPerf GB300 run's plan, and FP8 attention
    buys that step a few percent (cuDNN's measured MLA rates), not the tensor rate's 2x on its attention."""
    from studies.dataset import load_runs

    run = {r.id: r for r in load_runs(ROOT / "studies" / "data" / "scale_checks.toml")}["mlperf-v6.0-dsv3-256xgb300"]
    spec = load_compare(str(ROOT / "examples" / "gb300-fp8-attention.toml"))
    bf16, fp8 = spec.variants
    assert fp8.plan == run.plan and not bf16.plan["fp8_attention"]
    assert (fp8.model, fp8.gpu, fp8.gpus, fp8.cluster) == (run.model, run.gpu, run.gpus, run.cluster)
    ratio = compare(spec, points)["ratios"][1]["ratio"]
    assert 1.01 < ratio < 1.06


def test_the_fused_grouped_mlp_example_is_the_26_06_gb200_run_and_fused_is_faster(points: list[MeasuredPoint]) -> None:
    """examples/gb200-fused-grouped-mlp.toml: its fused variant is the held-out Megatron-Bridge 26.06 GB200 run's plan,
    and the fused grouped MLP buys that step a few percent (the GLU and the casts in the GEMMs' epilogues; the grouped
    GEMMs keep TE's fitted roll-off)."""
    from studies.dataset import load_runs

    run = {r.id: r for r in load_runs(ROOT / "studies" / "data" / "heldout_recent.toml")}["mcore-26.06-dsv3-256xgb200"]
    spec = load_compare(str(ROOT / "examples" / "gb200-fused-grouped-mlp.toml"))
    unfused, fused = spec.variants
    assert fused.plan == run.plan and not unfused.plan["fused_grouped_mlp"]
    assert (fused.model, fused.gpu, fused.gpus, fused.cluster) == (run.model, run.gpu, run.gpus, run.cluster)
    assert fused.measured_tokens_per_s_per_gpu == run.measured_tokens_per_s_per_gpu
    ratio = compare(spec, points)["ratios"][1]["ratio"]
    assert 1.005 < ratio < 1.06


def test_the_router_bounds_example_is_the_h100_mlperf_cell_and_its_capacity_bounds_the_skew(
        points: list[MeasuredPoint]) -> None:
    """examples/gpt-oss-h100-router-bounds.toml: its balanced variant is the held-out MLPerf GPT-OSS-20B 64-H100 cell's
    plan; under the recipe's per-expert capacity (1.25) even a router collapsed onto one rank costs little, while the
    same collapse without a capacity (dropless) nearly halves the throughput."""
    from studies.dataset import load_runs

    run = {r.id: r for r in load_runs(ROOT / "studies" / "data" / "mlperf_gpt_oss.toml")}["mlperf-v6.0-gpt-oss-20b-64xh100"]
    spec = load_compare(str(ROOT / "examples" / "gpt-oss-h100-router-bounds.toml"))
    balanced = spec.variants[0]
    assert {k: v for k, v in balanced.plan.items() if k in run.plan} == run.plan
    assert balanced.measured_tokens_per_s_per_gpu == run.measured_tokens_per_s_per_gpu
    ratios = [r["ratio"] for r in compare(spec, points)["ratios"]]
    assert 0.85 < ratios[2] < 1.0  # collapsed within the capacity
    assert ratios[3] < 0.7  # collapsed, dropless


def test_every_scenario_file_is_a_compare_file() -> None:
    spec = load_compare("dsv3-671b-b200")
    assert len(spec.variants) == 4 and {v.gpus for v in spec.variants} == {256}


# --- the output -----------------------------------------------------------------------------------------------

def test_json_keys_and_no_nan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(EXAMPLE), "--json"]) == 0
    data = _strict_json(capsys.readouterr().out)
    assert [v["name"] for v in data["variants"]] == ["HGX B200", "GB200 NVL72"]
    assert [r["name"] for r in data["ratios"]] == ["HGX B200", "GB200 NVL72"]
    for r in data["ratios"]:
        assert {"name", "ratio", "p10", "p90"} <= set(r)
    for v in data["variants"]:
        assert {"tokens_per_s_per_gpu", "step_time_s", "mfu", "peak_memory_gib", "gpu", "n_gpus"} <= set(v)


def test_table_shows_both_variants_and_the_interval(capsys: pytest.CaptureFixture[str],
                                                    example: dict[str, Any]) -> None:
    assert main(["compare", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    r = example["ratios"][1]
    assert "HGX B200" in out and "GB200 NVL72" in out
    assert f"{r['ratio']:.3f}x" in out and f"{r['p10']:.3f}-{r['p90']:.3f}x" in out


def test_predictions_are_moesim_predicts(capsys: pytest.CaptureFixture[str], example: dict[str, Any]) -> None:
    """The GB200 variant, predicted by ``moesim predict`` with the same settings as flags, gives the same number."""
    assert main(["predict", "--model", "qwen3-235b-a22b", "--gpu", "gb200", "--cluster", "gb200-nvl72", "--gpus",
                 "256", "--stack", "megatron-26.04", "--tp", "1", "--pp", "8", "--pp-schedule", "interleaved-1f1b",
                 "--vpp", "3", "--ep", "32", "--seq-len", "4096", "--global-batch", "8192", "--micro-batch", "1",
                 "--ac", "none", "--precision", "mxfp8", "--ep-backend", "hybridep", "--deepep-sms", "32",
                 "--routing", "balanced", "--pp-layout", "Et*3|(t*4|)*22t*3L", "--cuda-graphs", "partial",
                 "--json"]) == 0
    predicted = _strict_json(capsys.readouterr().out)["predictions"][0]
    assert predicted["tokens_per_s_per_gpu"] == example["variants"][1]["tokens_per_s_per_gpu"]
    assert predicted["step_time_s"] == example["variants"][1]["step_time_s"]


def test_ratio_is_the_ratio_of_the_predictions_inside_its_interval(example: dict[str, Any]) -> None:
    ref, gb200 = example["variants"]
    r = example["ratios"][1]
    assert r["ratio"] == gb200["tokens_per_s_per_gpu"] / ref["tokens_per_s_per_gpu"]
    assert r["p10"] < r["ratio"] < r["p90"]
    assert r["measured_ratio"] == pytest.approx(5680 / 3776)
    assert example["ratios"][0] == {**example["ratios"][0], "ratio": 1.0, "p10": 1.0, "p90": 1.0}


def test_the_variants_own_runs_are_left_out_of_their_interval(example: dict[str, Any]) -> None:
    basis = example["ratios"][1]["basis"]
    assert "mcore-26.04.01-qwen3-235b-256xb200" in basis and "mcore-26.04.01-qwen3-235b-256xgb200" in basis
    assert "different GPUs" in basis


def test_gpu_and_gpu_count_change_across_variants(debug: dict[str, Any]) -> None:
    b200, h100, again, slow_nic = debug["variants"]
    assert (b200["gpu"], b200["n_gpus"], h100["gpu"], h100["n_gpus"]) == ("b200", 8, "h100", 16)
    assert h100["cluster"] == "hgx-h100"
    rb, rh, ra, rn = debug["ratios"]
    assert rh["ratio"] == h100["tokens_per_s_per_gpu"] / b200["tokens_per_s_per_gpu"]
    assert rh["p10"] <= rh["ratio"] <= rh["p90"] and rh["p10"] < rh["p90"]
    assert "different GPUs" in rh["basis"]
    # identical to the reference: exactly 1, zero width; a changed NIC: an interval even at a ratio near 1
    assert (ra["ratio"], ra["p10"], ra["p90"]) == (1.0, 1.0, 1.0) == (rb["ratio"], rb["p10"], rb["p90"])
    assert rn["p10"] < rn["ratio"] < rn["p90"] and "the same GPU" in rn["basis"]
    assert slow_nic["tokens_per_s_per_gpu"] <= again["tokens_per_s_per_gpu"]


# --- the ratio residuals --------------------------------------------------------------------------------------

_PTS = [MeasuredPoint("a", "m", "b200", 100.0, 100.0), MeasuredPoint("b", "m", "gb200", 110.0, 130.0),
        MeasuredPoint("c", "m", "b200", 90.0, 80.0), MeasuredPoint("d", "n", "b200", 50.0, 55.0)]


def test_ratio_residuals_are_the_log_ratio_errors_of_ordered_pairs() -> None:
    res = ratio_residuals(_PTS, same_model=True, same_gpu=False)
    expected = math.log(100 / 110) - math.log(100 / 130)  # (a, b)
    assert len(res) == 4 and any(math.isclose(r, expected) for r in res)
    assert sorted(res) == pytest.approx(sorted(-r for r in res))  # ordered pairs: symmetric
    assert len(ratio_residuals(_PTS)) == 12
    assert len(ratio_residuals(_PTS, same_model=False)) == 6
    assert len(ratio_residuals(_PTS, exclude=("d",))) == 6


def test_interval_is_the_percentiles_around_the_ratio() -> None:
    iv = ratio_interval(2.0, [-0.2, -0.1, 0.0, 0.1, 0.2])
    assert iv.p10 == pytest.approx(2.0 * math.exp(-0.16)) and iv.p90 == pytest.approx(2.0 * math.exp(0.16))
    skewed = ratio_interval(1.0, [0.3, 0.4, 0.5])  # predicted ratios always high: the interval still holds 1
    assert skewed.p10 is not None and skewed.p90 == 1.0 and skewed.p10 < 1.0
    assert ratio_interval(1.0, []).p10 is None
    same = ratio_interval(1.0, [0.3, -0.3], identical=True)
    assert (same.p10, same.p90) == (1.0, 1.0)


def test_small_classes_fall_back_to_wider_ones() -> None:
    assert MIN_PAIRS > 2
    iv = pair_interval(1.5, _PTS, same_model=True, same_gpu=True)  # (a, c): 2 pairs, too few
    assert "(the same model; spread x" in iv.basis and iv.n_pairs == 6
    iv = pair_interval(1.5, _PTS, same_model=False, same_gpu=True)  # 4 pairs with d on B200: any GPU
    assert "(different models; spread x" in iv.basis and iv.n_pairs == 6
    iv = pair_interval(1.5, _PTS, same_model=False, same_gpu=True, exclude=("b",))  # then every pair
    assert "any two runs" in iv.basis and iv.n_pairs == 6 and "b left out" in iv.basis


def test_shipped_ratio_intervals_hold_most_measured_ratios(points: list[MeasuredPoint]) -> None:
    """Leave-two-out: each pair of measured runs' ratio interval from the other runs' pairs holds the measured
    ratio for most pairs (nominal 80%)."""
    from studies.compare import ratio_coverage

    cov = ratio_coverage(points)
    assert cov["pairs"] >= 100
    assert cov["coverage"] >= 0.65


def test_the_seed_example_gives_the_seed_speedups_with_their_intervals(points: list[MeasuredPoint]) -> None:
    """examples/seed-deepep-mxfp8.toml: the seed's three variants are its measured runs' plans, so the ratios are the
    speedups `moesim validate` gives them, each with a p10-p90 from the other runs' pair errors; DeepEP's measured
    1.32x lies inside its interval."""
    from studies.dataset import load_runs

    runs = {r.id: r for r in load_runs(ROOT / "studies" / "data" / "measured_runs.toml")}
    spec = load_compare(str(ROOT / "examples" / "seed-deepep-mxfp8.toml"))
    ids = ("titan-dsv3-b200-bf16", "titan-dsv3-b200-bf16-deepep", "titan-dsv3-b200-mxfp8-deepep")
    for variant, rid in zip(spec.variants, ids, strict=True):
        run = runs[rid]
        assert {k: variant.plan[k] for k in run.plan} == run.plan
        assert variant.measured_tokens_per_s_per_gpu == run.measured_tokens_per_s_per_gpu
    out = compare(spec, points)
    base, deepep, mxfp8 = (v["tokens_per_s_per_gpu"] for v in out["variants"])
    ratios = out["ratios"]
    assert ratios[1]["ratio"] == pytest.approx(deepep / base) and ratios[2]["ratio"] == pytest.approx(mxfp8 / base)
    assert all(r["p10"] <= r["ratio"] <= r["p90"] for r in ratios)
    assert ratios[1]["p10"] <= ratios[1]["measured_ratio"] <= ratios[1]["p90"]
    assert ratios[1]["measured_ratio"] == pytest.approx(859 / 651)
