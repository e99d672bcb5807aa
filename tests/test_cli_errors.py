"""Bad input exits with code 2 and one message naming the field and values; never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GOOD_MODEL = """
[toy]
n_layers = 4
n_dense_layers = 1
dense_inter_dim = 512
dim = 256
n_heads = 4
vocab_size = 1000
n_routed_experts = 8
top_k = 2
moe_inter_dim = 128
"""

GOOD_PLAN = """
[plan]
tp = 2
ep = 4
dp_shard = 4
seq_len = 1024
global_batch = 8
"""


def moesim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moesim", *args], capture_output=True, text=True, timeout=60)


def assert_user_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1, message
    for needle in needles:
        assert needle in message, message


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "model.toml").write_text(GOOD_MODEL)
    (tmp_path / "plan.toml").write_text(GOOD_PLAN)
    return tmp_path


def test_good_files_work(files: Path) -> None:
    result = moesim("show", str(files / "model.toml"), "--plan", str(files / "plan.toml"), "--gpu", "h100")
    assert result.returncode == 0, result.stderr
    assert "fits" in result.stdout


def test_unknown_key(files: Path) -> None:
    (files / "model.toml").write_text(GOOD_MODEL + "n_expertz = 3\n")
    assert_user_error(moesim("show", str(files / "model.toml")), "unknown key(s) n_expertz")


def test_missing_key(files: Path) -> None:
    (files / "model.toml").write_text(GOOD_MODEL.replace("top_k = 2\n", ""))
    assert_user_error(moesim("show", str(files / "model.toml")), "missing required key 'top_k'")


def test_degrees_do_not_multiply_to_gpu_count(files: Path) -> None:
    result = moesim("show", str(files / "model.toml"), "--plan", str(files / "plan.toml"), "--gpus", "16")
    assert_user_error(result, "dp_shard (4)", "tp (2)", "= 8", "16 GPUs")


def test_ep_does_not_divide_experts(files: Path) -> None:
    (files / "plan.toml").write_text(GOOD_PLAN.replace("ep = 4", "ep = 3").replace("dp_shard = 4", "dp_shard = 3")
                                     .replace("global_batch = 8", "global_batch = 9"))
    result = moesim("show", str(files / "model.toml"), "--plan", str(files / "plan.toml"))
    assert_user_error(result, "ep (3)", "number of experts (8)")


def test_tp_does_not_divide_heads(files: Path) -> None:
    (files / "plan.toml").write_text(GOOD_PLAN.replace("tp = 2", "tp = 8").replace("ep = 4", "ep = 8"))
    result = moesim("show", str(files / "model.toml"), "--plan", str(files / "plan.toml"))
    assert_user_error(result, "tp (8)", "heads (4)")


@pytest.mark.parametrize(("field", "value"), [("dim", "0"), ("n_layers", "-4"), ("moe_inter_dim", "-1")])
def test_zero_or_negative_model_size(files: Path, field: str, value: str) -> None:
    text = "\n".join(f"{field} = {value}" if line.startswith(f"{field} =") else line for line in GOOD_MODEL.splitlines())
    (files / "model.toml").write_text(text)
    assert_user_error(moesim("show", str(files / "model.toml")), f"{field} must be positive, got {value}")


def test_zero_plan_size_and_zero_seq_len(files: Path) -> None:
    (files / "plan.toml").write_text(GOOD_PLAN.replace("global_batch = 8", "global_batch = 0"))
    result = moesim("show", str(files / "model.toml"), "--plan", str(files / "plan.toml"))
    assert_user_error(result, "global_batch must be positive, got 0")
    result = moesim("show", "debug", "--seq-len", "0")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "--seq-len" in result.stderr


def test_malformed_toml(files: Path) -> None:
    (files / "model.toml").write_text("[toy\nn_layers = 4\n")
    assert_user_error(moesim("show", str(files / "model.toml")), "malformed TOML")


def test_malformed_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "deepseek_v3", ')
    assert_user_error(moesim("show", str(path)), "malformed JSON", "config.json")


def test_missing_file(tmp_path: Path) -> None:
    assert_user_error(moesim("show", str(tmp_path / "nowhere.toml")), "no such file")


def test_fp8_attention_without_an_fp8_precision() -> None:
    assert_user_error(moesim("predict", "--model", "deepseek-v3-16b", "--gpu", "h100", "--gpus", "64", "--ep", "8",
                             "--fp8-attention"), "fp8_attention needs an FP8 precision", "'bf16'")


def test_fp8_attention_on_a_stack_without_it() -> None:
    """TorchTitan runs attention in BF16 (``StackProfile.fp8_attention_available``): one line naming stack and field."""
    assert_user_error(moesim("predict", "--model", "deepseek-v3-16b", "--gpu", "b200", "--gpus", "64", "--ep", "8",
                             "--precision", "mxfp8", "--fp8-attention", "--stack", "torchtitan"),
                      "stack torchtitan cannot run fp8_attention True")


def test_unknown_catalog_model() -> None:
    assert_user_error(moesim("show", "gpt-5"), "unknown model 'gpt-5'")


def test_show_json_pins_the_headline_numbers() -> None:
    import json

    result = moesim("show", "deepseek-v3-671b", "--json", "--seq-len", "8192")
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert abs(data["params_total"] / 671e9 - 1) < 0.01
    assert abs(data["params_active"] / 37e9 - 1) < 0.03
    assert abs(data["flops_per_token_torchtitan"] / 3.4256e11 - 1) < 0.005


def test_catalog_lists_everything() -> None:
    result = moesim("catalog", "--json")
    assert result.returncode == 0
    import json

    data = json.loads(result.stdout)
    assert {m["name"] for m in data["models"]} >= {"deepseek-v3-671b", "deepseek-v3-16b", "deepseek-v2-236b",
                                                    "kimi-k2", "qwen3-235b-a22b", "qwen3-30b-a3b",
                                                    "mixtral-8x22b", "debug"}
    assert {g["name"] for g in data["gpus"]} == {"h100", "h200", "h800", "b200", "gb200", "b300", "gb300"}
    assert {"hgx-b200", "gb200-nvl72", "gb300-nvl72"} <= {c["name"] for c in data["clusters"]}
