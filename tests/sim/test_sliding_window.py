"""Sliding-window attention (GPT-OSS): the catalog model, the mean keys per query, the workload and the loader."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sim.accounting import (
    count_params,
    exact_flops_per_token,
    forward_matmul_flops_per_token,
)
from sim.catalog import load_model
from sim.errors import ConfigError
from sim.loaders import load_model_file
from sim.specs import ParallelPlan
from sim.stacks import load_stack
from sim.workload import Workload

GPT_OSS_CONFIG = {
    "model_type": "gpt_oss", "num_hidden_layers": 36, "hidden_size": 2880, "num_attention_heads": 64,
    "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 128, "num_experts_per_tok": 4,
    "intermediate_size": 2880, "vocab_size": 201088, "sliding_window": 128, "tie_word_embeddings": False,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
}


def test_gpt_oss_matches_its_model_card() -> None:
    model = load_model("gpt-oss-120b")
    counts = count_params(model)
    embedding = model.vocab_size * model.dim
    # OpenAI's card: 116.83 B in all (biases and sinks, 0.04 B, not modelled), 5.13 B active without the embedding.
    assert counts.total == pytest.approx(116.83e9, rel=0.002)
    assert counts.active - embedding == pytest.approx(5.13e9, rel=0.01)
    assert model.n_windowed_layers == 18


def test_windowed_keys_are_the_exact_causal_mean_of_min_position_and_window() -> None:
    model = load_model("gpt-oss-120b")
    for seq in (64, 128, 129, 4096):
        full = (seq + 1) / 2
        window = np.minimum(np.arange(1, seq + 1), 128).mean()
        assert model.mean_attended_keys(seq, full) == pytest.approx((full + window) / 2)
    every = replace(model, full_attention_interval=0)
    assert every.n_windowed_layers == 36
    assert every.mean_attended_keys(4096, 2048.5) == pytest.approx(np.minimum(np.arange(1, 4097), 128).mean())
    # A document mask shorter than the window bounds the windowed layers too.
    assert every.mean_attended_keys(4096, 50.0) == 50.0
    assert replace(model, sliding_window=0, full_attention_interval=0).mean_attended_keys(4096, 2048.5) == 2048.5


def test_window_cuts_attention_core_flops_in_the_workload_and_the_exact_count() -> None:
    windowed = load_model("gpt-oss-120b")
    full = replace(windowed, sliding_window=0, full_attention_interval=0)
    plan = ParallelPlan(ep=8, dp_shard=8, global_batch=64, micro_batch=1, seq_len=4096)
    stack = load_stack("megatron")

    def core_flops(model):  # type: ignore[no-untyped-def]
        ops = Workload(model, plan, stack).layer_ops("moe", "fwd")
        return sum(op.flops for op in ops if op.name == "attn.core")

    ratio = windowed.mean_attended_keys(4096, 2048.5) / 2048.5
    assert core_flops(windowed) == pytest.approx(core_flops(full) * ratio)
    assert 0.5 < ratio < 0.55
    per_full = forward_matmul_flops_per_token(full, 4096)["attn.core"]
    assert forward_matmul_flops_per_token(windowed, 4096)["attn.core"] == pytest.approx(per_full * ratio)
    assert exact_flops_per_token(windowed, 4096) < exact_flops_per_token(full, 4096)


def test_gpt_oss_config_json_gives_the_catalog_model(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT_OSS_CONFIG))
    loaded = load_model_file(path)
    catalog = load_model("gpt-oss-120b")
    assert (loaded.sliding_window, loaded.full_attention_interval) == (128, 2)
    assert count_params(loaded).total == count_params(catalog).total
    assert loaded.mean_attended_keys(4096, 2048.5) == catalog.mean_attended_keys(4096, 2048.5)


@pytest.mark.parametrize(("layer_types", "message"), [
    (["full_attention"] * 10 + ["sliding_attention"] * 26, "10 full-attention layers of 36"),
    (["sliding_attention", "global"] * 18, "layer_types must be a list"),
    (None, "without layer_types"),
    (["sliding_attention", "full_attention"] * 17, "34 entries for num_hidden_layers 36"),
])
def test_gpt_oss_config_with_an_unsupported_window_pattern_names_it(tmp_path: Path, layer_types: object,
                                                                    message: str) -> None:
    config = {k: v for k, v in GPT_OSS_CONFIG.items() if k != "layer_types"}
    if layer_types is not None:
        config["layer_types"] = layer_types
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=message):
        load_model_file(path)


def test_a_full_first_alternation_reads_as_the_same_share(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GPT_OSS_CONFIG, "layer_types": ["full_attention", "sliding_attention"] * 18}))
    model = load_model_file(path)
    assert model.full_attention_interval == 2 and model.n_windowed_layers == 18


def test_full_attention_interval_needs_a_window() -> None:
    with pytest.raises(ConfigError, match="full_attention_interval .* needs a sliding_window"):
        replace(load_model("gpt-oss-120b"), sliding_window=0)
