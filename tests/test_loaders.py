"""Strict spec loading: HuggingFace config.json, TOML, and the errors bad files give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.accounting import count_params, torchtitan_flops_per_token
from sim.catalog import load_cluster, load_model
from sim.errors import CatalogError, ConfigError
from sim.loaders import load_model_file, load_plan_file

DEEPSEEK_V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "routed_scaling_factor": 2.5,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "qk_nope_head_dim": 128,
    "topk_method": "noaux_tc",
    "n_group": 8,
    "topk_group": 4,
    "num_experts_per_tok": 8,
    "moe_layer_freq": 1,
    "first_k_dense_replace": 3,
    "norm_topk_prob": True,
    "scoring_func": "sigmoid",
    "num_nextn_predict_layers": 1,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "rope_theta": 10000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def write_config(tmp_path: Path, config: dict) -> Path:
    folder = tmp_path / "DeepSeek-V3"
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_deepseek_v3_config_json_gives_the_catalog_numbers(tmp_path: Path) -> None:
    from_file = load_model(str(write_config(tmp_path, DEEPSEEK_V3_CONFIG)))
    catalog = load_model("deepseek-v3-671b")
    assert from_file.name == "DeepSeek-V3"
    assert count_params(from_file).total == count_params(catalog).total
    assert count_params(from_file).active == count_params(catalog).active
    assert torchtitan_flops_per_token(from_file, 8192) == pytest.approx(3.4256e11, rel=0.005)
    assert count_params(from_file).total == pytest.approx(671e9, rel=0.01)


def test_deepseek_v2_lite_config_gives_the_16b_numbers(tmp_path: Path) -> None:
    config = dict(DEEPSEEK_V3_CONFIG, model_type="deepseek_v2", hidden_size=2048, intermediate_size=10944,
                  moe_intermediate_size=1408, num_hidden_layers=27, num_attention_heads=16, n_shared_experts=2,
                  n_routed_experts=64, q_lora_rank=None, n_group=1, topk_group=1, num_experts_per_tok=6,
                  first_k_dense_replace=1, scoring_func="softmax", vocab_size=102400, norm_topk_prob=False,
                  routed_scaling_factor=1.0, num_nextn_predict_layers=0)
    model = load_model(str(write_config(tmp_path, config)))
    assert model.q_lora_rank == 0
    assert count_params(model).total == pytest.approx(15.7e9, rel=0.01)
    assert torchtitan_flops_per_token(model, 8192) == pytest.approx(2.1503e10, rel=0.005)


def test_qwen3_and_mixtral_configs_load(tmp_path: Path) -> None:
    qwen = {"model_type": "qwen3_moe", "hidden_size": 4096, "num_hidden_layers": 94, "num_attention_heads": 64,
            "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
            "moe_intermediate_size": 1536, "vocab_size": 151936, "norm_topk_prob": True,
            "tie_word_embeddings": False, "decoder_sparse_step": 1}
    path = tmp_path / "qwen.json"
    path.write_text(json.dumps(qwen))
    assert count_params(load_model_file(path)).total == count_params(load_model("qwen3-235b-a22b")).total
    mixtral = {"model_type": "mixtral", "hidden_size": 6144, "num_hidden_layers": 56, "num_attention_heads": 48,
               "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
               "intermediate_size": 16384, "vocab_size": 32768, "tie_word_embeddings": False}
    path = tmp_path / "mixtral.json"
    path.write_text(json.dumps(mixtral))
    assert count_params(load_model_file(path)).total == count_params(load_model("mixtral-8x22b")).total


def test_unknown_model_type_names_it(tmp_path: Path) -> None:
    path = tmp_path / "llama.json"
    path.write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ConfigError, match="model_type 'llama'"):
        load_model_file(path)


def test_unknown_catalog_name_lists_the_catalog() -> None:
    with pytest.raises(CatalogError, match="deepseek-v3-671b"):
        load_model("deepseek-v9")


def test_plan_file_rejects_unknown_and_bad_keys(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text("[plan]\ntp = 2\nexpert_parallel = 4\n")
    with pytest.raises(ConfigError, match="expert_parallel"):
        load_plan_file(path)
    path.write_text("tp = 'two'\n")
    with pytest.raises(ConfigError, match="tp must be an integer"):
        load_plan_file(path)
    path.write_text("tp = 0\n")
    with pytest.raises(ConfigError, match="tp must be positive, got 0"):
        load_plan_file(path)
    path.write_text("precision = 'fp4'\n")
    with pytest.raises(ConfigError, match="precision must be one of"):
        load_plan_file(path)


def test_cluster_resizes_and_converts_units() -> None:
    cluster = load_cluster("hgx-b200", n_gpus=64)
    assert cluster.n_nodes == 8
    assert cluster.nic_bw_bytes_per_s == 50e9  # 400 Gb/s
    assert cluster.nvlink_bw == 900e9
    rack = load_cluster("gb200-nvl72")
    assert rack.domain_size == 72


def test_kimi_k2_config_uses_deepseek_field_names(tmp_path: Path) -> None:
    config = dict(DEEPSEEK_V3_CONFIG, model_type="kimi_k2", num_attention_heads=64, n_routed_experts=384,
                  first_k_dense_replace=1, n_group=1, topk_group=1, vocab_size=163840, routed_scaling_factor=2.827,
                  num_nextn_predict_layers=0)
    path = tmp_path / "kimi.json"
    path.write_text(json.dumps(config))
    assert count_params(load_model_file(path)).total == count_params(load_model("kimi-k2")).total


def test_qwen3_without_head_dim_takes_hidden_over_heads(tmp_path: Path) -> None:
    qwen = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 32,
            "num_key_value_heads": 4, "num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 512,
            "vocab_size": 1000}
    path = tmp_path / "qwen.json"
    path.write_text(json.dumps(qwen))
    assert load_model_file(path).head_dim == 64
    path.write_text(json.dumps({**qwen, "head_dim": 128}))
    assert load_model_file(path).head_dim == 128
    path.write_text(json.dumps({**qwen, "decoder_sparse_step": 2}))
    with pytest.raises(ConfigError, match="decoder_sparse_step 2"):
        load_model_file(path)
    path.write_text(json.dumps({**qwen, "hidden_size": 10 ** 9}))
    with pytest.raises(ConfigError, match="hidden_size"):
        load_model_file(path)


def test_plan_unknown_key_message_lists_the_allowed_keys(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text("expert_parallel = 4\n")
    with pytest.raises(ConfigError, match=r"allowed: ac, .*, dp_replicate, dp_shard, .*tp, vpp"):
        load_plan_file(path)


def test_derived_plan_fields_follow_torchtitan() -> None:
    from sim.loaders import INTERLEAVED_DEFAULT_VPP, derive_plan_fields

    assert derive_plan_fields({"tp": 2, "dp_replicate": 4}, 64)["dp_shard"] == 8
    assert derive_plan_fields({"tp": 2, "dp_shard": 4}, 64)["dp_replicate"] == 8
    assert derive_plan_fields({"pp": 2, "vpp": 2}, 8)["pp_schedule"] == "interleaved-1f1b"
    assert "pp_schedule" not in derive_plan_fields({"pp": 2, "vpp": 1}, 8)
    assert derive_plan_fields({"pp": 2, "pp_schedule": "interleaved-1f1b"}, 8)["vpp"] == INTERLEAVED_DEFAULT_VPP
    assert "vpp" not in derive_plan_fields({"pp": 1, "pp_schedule": "interleaved-1f1b"}, 8)
    # default batch: max(8, 2 * pp * vpp) microbatches of micro_batch per data-parallel rank
    assert derive_plan_fields({"pp": 2, "vpp": 4, "micro_batch": 2}, 16)["global_batch"] == 16 * 2 * 8
    assert derive_plan_fields({}, 8)["global_batch"] == 8 * 8


def test_derived_degrees_are_integers() -> None:
    from sim.loaders import derive_plan_fields

    f = derive_plan_fields({"tp": 2, "pp": 2}, 64)
    assert type(f["dp_shard"]) is int and f["dp_shard"] == 16
    assert type(derive_plan_fields({"tp": 2, "dp_shard": 4}, 64)["dp_replicate"]) is int


def test_glm45_config_gives_its_model_card(tmp_path: Path) -> None:
    """GLM-4.5 (zai-org, model_type glm4_moe): GQA with DeepSeek-V3's MoE; 355 B in all with its MTP layer, 32 B active."""
    config = {"model_type": "glm4_moe", "first_k_dense_replace": 3, "head_dim": 128, "hidden_size": 5120,
              "intermediate_size": 12288, "moe_intermediate_size": 1536, "n_group": 1, "n_routed_experts": 160,
              "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 96, "num_experts_per_tok": 8,
              "num_hidden_layers": 92, "num_key_value_heads": 8, "partial_rotary_factor": 0.5,
              "routed_scaling_factor": 2.5, "topk_group": 1, "use_qk_norm": True, "vocab_size": 151552,
              "num_nextn_predict_layers": 1, "tie_word_embeddings": False}
    path = tmp_path / "glm-4.5" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    model = load_model_file(path)
    counts = count_params(model)
    assert (model.name, model.attention, model.score_func, model.qk_norm, model.n_mtp_layers) == (
        "glm-4.5", "gqa", "sigmoid", True, 1)
    assert counts.total + counts.mtp == pytest.approx(355e9, rel=0.01)
    assert counts.active - 2 * model.vocab_size * model.dim == pytest.approx(32e9, rel=0.01)  # embedding and head apart
