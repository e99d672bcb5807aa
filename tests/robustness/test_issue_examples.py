"""Issue 10's list of bad inputs, one test each: exit 2 with one line naming the field and the value.

Each of these gave a traceback, a hang or a silently wrong number before the fix (reproduced on main
at 9c5ae97 before the validation layer landed).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.robustness.cli import assert_user_error, run_cli

SMALL = ["predict", "--model", "deepseek-v3-16b", "--gpus", "16", "--ep", "8"]

CLUSTER = """
[mine]
gpu = "b200"
n_gpus = 16
gpus_per_node = 8
nvlink_domain_gpus = 8
nics_per_gpu = 1
nic_gbps = 400
"""


@pytest.mark.parametrize("flag", ["--tp", "--pp", "--cp", "--dp-shard", "--dp-replicate"])
def test_zero_degree_flags(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert_user_error(run_cli([*SMALL, flag, "0"], capsys), f"argument {flag}", "got 0")


def test_negative_routing_seed(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli([*SMALL, "--routing", "zipf:1", "--routing-seed", "-1"], capsys)
    assert_user_error(result, "--routing-seed", "-1")


def test_binary_tokens_per_expert_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "load.bin"
    path.write_bytes(bytes(range(256)) * 4)
    assert_user_error(run_cli([*SMALL, "--routing", str(path)], capsys), "routing", "binary")


@pytest.mark.parametrize(("routing", "needle"), [("zipf:nan", "finite"), ("zipf:inf", "finite"),
                                                  ("dirichlet:0", "positive"), ("zipf:x", "expected a number")])
def test_routing_parameters(routing: str, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert_user_error(run_cli([*SMALL, "--routing", routing], capsys), routing, needle)


def _hf_config(tmp_path: Path, **changes: object) -> str:
    config = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
              "vocab_size": 1000, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
              "first_k_dense_replace": 1, "intermediate_size": 512, "q_lora_rank": None, "kv_lora_rank": 64,
              "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32}
    config.update(changes)
    folder = tmp_path / "hf"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder / "config.json")


def test_hf_config_is_valid_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["show", _hf_config(tmp_path)], capsys)
    assert code == 0, err
    assert "layers 4" in out


@pytest.mark.parametrize(("changes", "needles"), [
    ({"model_type": ["deepseek_v3"]}, ("model_type", "['deepseek_v3']")),
    ({"hidden_size": 1e300}, ("hidden_size", "1e+300")),
    ({"num_attention_heads": "4"}, ("num_attention_heads", "'4'")),
    ({"vocab_size": True}, ("vocab_size", "True")),
    ({"num_hidden_layers": -3}, ("n_layers", "-3")),
])
def test_hf_config_bad_values(tmp_path: Path, changes: dict[str, object], needles: tuple[str, ...],
                              capsys: pytest.CaptureFixture[str]) -> None:
    assert_user_error(run_cli(["show", _hf_config(tmp_path, **changes)], capsys), *needles)


def test_qwen_head_count_string_before_arithmetic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "qwen3_moe", "num_hidden_layers": 2, "hidden_size": 256,
                                "num_attention_heads": "four", "num_key_value_heads": 2, "vocab_size": 100,
                                "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64}))
    assert_user_error(run_cli(["show", str(path)], capsys), "num_attention_heads", "'four'")


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000])
def test_json_nested_100000_deep(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    assert_user_error(run_cli(["show", str(path)], capsys), "config.json", "nested deeper")


def test_json_nan_literal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "deepseek_v3", "hidden_size": NaN}')
    assert_user_error(run_cli(["show", str(path)], capsys), "config.json", "malformed JSON")


def _scenario(tmp_path: Path, head: str = 'model = "deepseek-v3-16b"\ngpus = 16', base: str = "ep = 8",
              variants: str = '[[variant]]\nname = "a"') -> str:
    path = tmp_path / "sc.toml"
    path.write_text(f"[scenario]\n{head}\n[base]\n{base}\n{variants}\n")
    return str(path)


def test_scenario_with_no_variants(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sc.toml"
    path.write_text('variant = []\n[scenario]\nmodel = "deepseek-v3-16b"\ngpus = 16\n[base]\nep = 8\n')
    assert_user_error(run_cli(["predict", "--scenario", str(path)], capsys), "variant", "[]")


def test_scenario_valid_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["predict", "--scenario", _scenario(tmp_path)], capsys)
    assert code == 0, err
    assert "tok/s/GPU" in out


@pytest.mark.parametrize(("kwargs", "needles"), [
    ({"head": "model = 5\ngpus = 16"}, ("model", "5")),
    ({"base": 'ep = 8\npp = "8"'}, ("pp", "'8'")),
    ({"base": "ep = 8\ntp = 0"}, ("tp", "0")),
    ({"base": "ep = 8\nseq_len = nan"}, ("seq_len", "nan")),
    ({"base": "ep = 8\nbogus = 1"}, ("bogus",)),
    ({"head": 'model = "deepseek-v3-16b"\ngpus = 0'}, ("gpus", "0")),
    ({"variants": '[[variant]]\nname = "a"\nplan = { tp = -1 }'}, ("tp", "-1")),
    ({"variants": '[[variant]]\nname = "a"\nmeasured_tokens_per_s_per_gpu = inf'}, ("measured", "inf")),
    ({"variants": '[[variant]]\nname = "a"\n[[variant]]\nname = "a"'}, ("unique",)),
])
def test_bad_scenarios(tmp_path: Path, kwargs: dict[str, str], needles: tuple[str, ...],
                       capsys: pytest.CaptureFixture[str]) -> None:
    assert_user_error(run_cli(["predict", "--scenario", _scenario(tmp_path, **kwargs)], capsys), *needles)


@pytest.mark.parametrize(("line", "needles"), [
    ("nvlink_latency_us = inf", ("nvlink_latency_us", "inf")),
    ("nics_per_gpu = 1000000", ("nics_per_gpu", "1000000")),
    ("nic_gbps = nan", ("nic_gbps", "nan")),
    ("nic_gbps = 0", ("nic_gbps must be at least", "got 0")),
    ('gpus_per_node = "8"', ("gpus_per_node", "'8'")),
])
def test_bad_cluster_files(tmp_path: Path, line: str, needles: tuple[str, ...],
                           capsys: pytest.CaptureFixture[str]) -> None:
    key = line.split(" =")[0]
    text = "\n".join(x for x in CLUSTER.splitlines() if not x.startswith(key + " =")) + f"\n{line}\n"
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    assert_user_error(run_cli([*SMALL, "--cluster", str(path)], capsys), *needles)


def test_fabric_infinite_latency(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(CLUSTER + "[mine.fabric]\nhop_latency_us = inf\n")
    assert_user_error(run_cli([*SMALL, "--cluster", str(path)], capsys), "hop_latency_us", "inf")


@pytest.mark.parametrize(("value", "needle"), [("nan", "finite"), ("inf", "finite"), ("0", "above 0"),
                                                ("-5", "above 0"), ("fast", "expected a number")])
def test_nic_gbps_flag(value: str, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--nic-gbps nan`` never ended on a multi-node plan; ``--nic-gbps 0`` was silently ignored."""
    assert_user_error(run_cli([*SMALL, "--nic-gbps", value], capsys), "--nic-gbps", needle)


def test_nic_gbps_changes_the_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    slow = json.loads(run_cli([*SMALL, "--nic-gbps", "1", "--json"], capsys)[1])
    fast = json.loads(run_cli([*SMALL, "--nic-gbps", "400", "--json"], capsys)[1])
    assert slow["predictions"][0]["step_time_s"] > fast["predictions"][0]["step_time_s"]


@pytest.mark.parametrize("batch", ["1" + "0" * 12, "1073741824", "99999999999999999999999999"])
def test_huge_global_batch_is_bounded(batch: str, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    assert_user_error(run_cli([*SMALL, "--global-batch", batch], capsys), "global_batch" if len(batch) < 11
                      and int(batch) <= 1 << 30 else "--global-batch")
    assert time.monotonic() - started < 30  # a bound on work, not a timing target


def test_microbatch_count_bound_names_the_fields(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli([*SMALL, "--global-batch", str(2 * 8192 * 16 + 0)], capsys)
    assert_user_error(result, "global_batch", "microbatches")


def test_trace_into_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli([*SMALL, "--trace", str(tmp_path / "nowhere" / "t.json")], capsys)
    assert_user_error(result, "No such file")


def test_unknown_flag_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert_user_error(run_cli(["predict", "--tpp", "2"], capsys), "--tpp")


def test_show_and_predict_agree_on_the_default_seq_len(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["show", "deepseek-v3-16b", "--json"], capsys)
    shown = json.loads(out)["seq_len"]
    code, out, _ = run_cli([*SMALL, "--json"], capsys)
    assert json.loads(out)["predictions"][0]["plan"]["seq_len"] == shown


def test_show_seq_len_follows_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text("[plan]\nep = 8\ndp_shard = 8\nseq_len = 2048\nglobal_batch = 8\n")
    code, out, err = run_cli(["show", "deepseek-v3-16b", "--plan", str(plan), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["seq_len"] == 2048
    assert_user_error(run_cli(["show", "deepseek-v3-16b", "--plan", str(plan), "--seq-len", "4096"], capsys),
                      "--seq-len (4096)", "2048")


def test_json_depth_counts_levels() -> None:
    from sim.limits import json_depth

    assert json_depth(1) == 0
    assert json_depth([]) == 1 and json_depth({}) == 1
    assert json_depth([1, [2, [3]]]) == 3
    assert json_depth({"a": {"b": [1]}, "c": 2}) == 3
    assert json_depth([[[]], [[[[]]]]]) == 5  # the deepest branch, not the first
    deep: list = []
    for _ in range(200):
        deep = [deep]
    assert json_depth(deep, limit=10) == 11  # stops counting past the limit
    assert json_depth(deep, limit=500) == 201


def test_toml_nesting_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plan.toml"
    path.write_text("x = " + "[" * 70 + "]" * 70 + "\n")
    assert_user_error(run_cli(["show", "debug", "--plan", str(path)], capsys), "nested deeper than 64")
