"""FLOPs formulas: Megatron-Bridge's reproduces its published TFLOP/s from its published tokens/s."""

from __future__ import annotations

import json

import pytest

from sim.accounting import torchtitan_flops_per_token
from sim.catalog import load_model
from sim.errors import ConfigError
from sim.flops import flops_per_token, megatron_flops_per_token


@pytest.mark.parametrize("model, mtp, tokens_per_s, tflops", [
    ("deepseek-v3-671b", 1, 2689, 699),   # Megatron-Bridge 26.02, 256 B200 (their recipe trains one MTP layer)
    ("qwen3-235b-a22b", 0, 3805, 563),    # 26.02, 256 B200
    ("qwen3-30b-a3b", 0, 27136, 619),     # 26.04.01, 8 B200
])
def test_megatron_formula_matches_the_published_tflops(model: str, mtp: int, tokens_per_s: float, tflops: float) -> None:
    got = megatron_flops_per_token(load_model(model), 4096, mtp_layers=mtp) * tokens_per_s / 1e12
    assert got == pytest.approx(tflops, rel=0.01)


def test_torchtitan_formula_is_higher_and_the_dispatcher_names_the_formula() -> None:
    m = load_model("deepseek-v3-671b")
    assert flops_per_token(m, 4096) == torchtitan_flops_per_token(m, 4096)
    ratio = flops_per_token(m, 4096, "torchtitan") / flops_per_token(m, 4096, "megatron")
    assert 1.05 < ratio < 1.15
    with pytest.raises(ConfigError, match="flops formula"):
        flops_per_token(m, 4096, "palm")


def test_predict_flops_formula_changes_tflops_not_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    from moesim.predict_cmd import main

    args = ["--model", "deepseek-v3-16b", "--gpu", "b200", "--gpus", "16", "--ep", "8", "--json"]
    assert main(args) == 0
    titan = json.loads(capsys.readouterr().out)
    assert main([*args, "--flops-formula", "megatron"]) == 0
    mega = json.loads(capsys.readouterr().out)
    t, m = titan["predictions"][0], mega["predictions"][0]
    assert mega["flops_formula"] == "megatron" and t["tokens_per_s_per_gpu"] == m["tokens_per_s_per_gpu"]
    assert m["tflops_per_gpu"] < t["tflops_per_gpu"] and m["mfu"] < t["mfu"]
