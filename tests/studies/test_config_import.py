"""Framework configs in (studies.config_import, ``moesim predict --from-torchtitan / --from-megatron``): the
shipped examples resolve to the plans of the measured runs they were written from, field by field; unknown
keys are listed; values moesim cannot express exit 2 naming the key and the value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moesim.predict_cmd import main as predict_main
from sim.errors import ConfigError
from sim.loaders import plan_from_mapping
from sim.pp_layout import check_layout, decoders_per_chunk
from studies.config_import import import_config, megatron_layout, plan_fields
from studies.dataset import load_runs, resolve_run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CASES = [
    ("torchtitan", "torchtitan-dsv3-671b.toml", "titan-dsv3-b200-bf16"),
    ("megatron", "megatron-dsv3-gb200.yaml", "mcore-26.04.01-dsv3-256xgb200"),
    ("megatron", "megatron-dsv3-gb200.args", "mcore-26.04.01-dsv3-256xgb200"),
]


def _run(run_id: str):
    return next(r for r in load_runs() if r.id == run_id)


@pytest.mark.parametrize(("framework", "name", "run_id"), CASES)
def test_example_reproduces_the_measured_runs_plan(framework: str, name: str, run_id: str) -> None:
    run = _run(run_id)
    model, _, want = resolve_run(run)
    cfg = import_config(EXAMPLES / name, framework)
    assert (cfg.model, cfg.stack) == (run.model, run.stack)
    got = plan_from_mapping(plan_fields(cfg, run.gpus), "imported").as_dict()
    assert got.keys() == want.as_dict().keys()
    for field, value in want.as_dict().items():
        assert got[field] == value, field
    if got["pp_layout"]:
        check_layout(got["pp_layout"], n_chunks=got["pp"] * got["vpp"], n_layers=model.n_layers,
                     mtp_layers=got["mtp_layers"])


def test_cli_from_torchtitan_predicts_the_runs_plan(capsys: pytest.CaptureFixture[str]) -> None:
    run = _run("titan-dsv3-b200-bf16")
    assert predict_main(["--from-torchtitan", str(EXAMPLES / "torchtitan-dsv3-671b.toml"), "--gpu", "b200",
                         "--gpus", "256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    pred = out["predictions"][0]
    _, _, want = resolve_run(run)
    assert pred["plan"] == want.as_dict()
    assert out["provenance"]["stack"]["name"] == "torchtitan"
    assert any(n.startswith("ignored keys: ") and "job.*" in n for n in out["notes"])


def test_command_line_flags_override_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert predict_main(["--from-megatron", str(EXAMPLES / "megatron-dsv3-gb200.yaml"), "--gpu", "gb200",
                         "--gpus", "256", "--ep-backend", "deepep", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["predictions"][0]["plan"]
    assert (plan["ep_backend"], plan["ep"], plan["precision"]) == ("deepep", 64, "mxfp8")


def test_unknown_keys_are_listed(tmp_path: Path) -> None:
    text = (EXAMPLES / "torchtitan-dsv3-671b.toml").read_text()
    path = tmp_path / "job.toml"
    path.write_text(text.replace("[parallelism]\n", "[parallelism]\nfancy_new_overlap = true\n")
                    + "\n[float9]\nenable = true\n")
    cfg = import_config(path, "torchtitan")
    assert "parallelism.fancy_new_overlap" in cfg.ignored and "float9.*" in cfg.ignored
    assert "parallelism.tensor_parallel_degree" not in cfg.ignored
    yaml_path = tmp_path / "recipe.yaml"
    yaml_path.write_text((EXAMPLES / "megatron-dsv3-gb200.yaml").read_text() + "logger:\n  log_interval: 1\n")
    ignored = import_config(yaml_path, "megatron").ignored
    assert {"logger.*", "model.moe_router_dtype"} <= set(ignored)
    assert not any(k.startswith(("train.", "ddp.", "mixed_precision")) for k in ignored)


def test_unknown_key_printed_as_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.args"
    path.write_text("--num-layers 4 --tensor-model-parallel-size 1 --expert-model-parallel-size 4 "
                    "--micro-batch-size 1 --global-batch-size 64 --seq-length 512 --moe-shiny-new-thing 3")
    assert predict_main(["--from-megatron", str(path), "--model", "debug", "--gpus", "8", "--gpu", "b200"]) == 0
    assert "ignored keys: moe_shiny_new_thing" in capsys.readouterr().out


@pytest.mark.parametrize(("framework", "old", "new", "named"), [
    ("torchtitan", 'pipeline_parallel_schedule = "Interleaved1F1B"', 'pipeline_parallel_schedule = "ZBVZeroBubble"',
     "parallelism.pipeline_parallel_schedule = 'ZBVZeroBubble'"),
    ("torchtitan", 'flavor = "671B"', 'flavor = "405B"', "model.flavor = 'deepseek_v3 405B'"),
    ("torchtitan", 'converters = []', 'converters = ["float8"]', "model.converters = ['float8']"),
    ("torchtitan", 'mode = "full"', 'mode = "sometimes"', "activation_checkpoint.mode = 'sometimes'"),
    ("megatron", "moe_token_dispatcher_type: flex", "moe_token_dispatcher_type: allgather",
     "model.moe_token_dispatcher_type = 'allgather'"),
    ("megatron", "mixed_precision: bf16_with_mxfp8_mixed", "mixed_precision: bf16_with_fp8_delayed_scaling_mixed",
     "mixed_precision = 'bf16_with_fp8_delayed_scaling_mixed'"),
    ("megatron", "use_distributed_optimizer: true", "use_distributed_optimizer: false",
     "ddp.use_distributed_optimizer = False"),
    ("megatron", "num_layers: 61", "num_layers: 62", "model.num_layers = 62"),
    ("megatron", "pipeline_model_parallel_size: 4", "pipeline_model_parallel_size: 0",
     "model.pipeline_model_parallel_size = 0"),
])
def test_inexpressible_value_exits_2_naming_key_and_value(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          framework: str, old: str, new: str, named: str) -> None:
    source = EXAMPLES / ("torchtitan-dsv3-671b.toml" if framework == "torchtitan" else "megatron-dsv3-gb200.yaml")
    text = source.read_text()
    assert old in text
    path = tmp_path / source.name
    path.write_text(text.replace(old, new))
    flag = "--from-torchtitan" if framework == "torchtitan" else "--from-megatron"
    assert predict_main([flag, str(path), "--gpu", "b200", "--gpus", "256"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and named in err and str(path) in err, err


def test_conflicting_values_of_one_megatron_key_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("model:\n  seq_length: 4096\ndataset:\n  seq_length: 8192\n")
    with pytest.raises(ConfigError, match="seq_length is given twice"):
        import_config(path, "megatron")


def test_explicit_degrees_imply_the_gpu_count(tmp_path: Path) -> None:
    text = (EXAMPLES / "torchtitan-dsv3-671b.toml").read_text()
    path = tmp_path / "job.toml"
    path.write_text(text.replace("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 16"))
    cfg = import_config(path, "torchtitan")
    assert cfg.world_size == 64
    assert plan_fields(cfg, 64)["global_batch"] == 64 * 16
    with pytest.raises(ConfigError, match="multiply to 64 GPUs, not --gpus 256"):
        plan_fields(cfg, 256)


def test_layers_per_stage_sets_the_stages_per_rank(tmp_path: Path) -> None:
    text = (EXAMPLES / "torchtitan-dsv3-671b.toml").read_text()
    path = tmp_path / "job.toml"
    # (61 layers + embedding + output) / 8 per stage -> 8 stages over pp 2: 4 per rank
    path.write_text(text.replace("pipeline_parallel_microbatch_size = 1",
                                 "pipeline_parallel_microbatch_size = 1\npipeline_parallel_layers_per_stage = 8"))
    assert plan_fields(import_config(path, "torchtitan"), 256)["vpp"] == 4


def test_megatron_layout_gives_embedding_and_loss_their_own_chunks() -> None:
    layout = megatron_layout(2, 2, 2, embedding=True, loss=True)
    assert decoders_per_chunk(layout) == [0, 1, 1, 0]
    assert megatron_layout(6, 2, 2, embedding=True, loss=True, mtp=1) == "Et|(t*2|)*2tmL"
    assert megatron_layout(8, 4, first=1, last=1) == "Et|(t*3|)*2tL"
    # virtual stage v of rank r is chunk v * pp + r: the first rank's chunks are 0 and 2
    assert decoders_per_chunk(megatron_layout(10, 2, 2, first=4, last=6)) == [2, 3, 2, 3]
    with pytest.raises(ConfigError, match="do not divide evenly"):
        megatron_layout(61, 4, 4, embedding=True, loss=True)


def test_pp_times_vpp_may_exceed_the_decoder_layers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The debug model has 4 decoder layers; pp 2 x vpp 3 = 6 chunks with the embedding and loss accounted."""
    path = tmp_path / "small.args"
    path.write_text("--num-layers 4 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 "
                    "--virtual-pipeline-model-parallel-size 3 --expert-model-parallel-size 4 --micro-batch-size 1 "
                    "--global-batch-size 64 --seq-length 512 --mtp-num-layers 0 --use-distributed-optimizer "
                    "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split")
    assert predict_main(["--from-megatron", str(path), "--model", "debug", "--gpu", "b200", "--gpus", "8",
                         "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["predictions"][0]["plan"]
    assert (plan["pp"], plan["vpp"]) == (2, 3)
    assert decoders_per_chunk(plan["pp_layout"]) == [0, 1, 1, 1, 1, 0]


def test_explicit_model_must_agree_with_the_configs_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    yaml = EXAMPLES / "megatron-dsv3-gb200.yaml"
    assert predict_main(["--from-megatron", str(yaml), "--model", "kimi-k2", "--gpu", "gb200", "--gpus", "256"]) == 2
    assert "model.num_moe_experts = 256, but model kimi-k2 has n_routed_experts 384" in capsys.readouterr().err
    path = tmp_path / "r.yaml"
    path.write_text(yaml.read_text().replace("num_layers: 61", "num_layers: 30"))
    assert import_config(path, "megatron").model is None
    assert predict_main(["--from-megatron", str(path), "--gpu", "gb200", "--gpus", "256"]) == 2
    assert "model.num_layers = 30" in capsys.readouterr().err


@pytest.mark.parametrize(("scope", "graphs", "captured", "noted"), [
    ('["attn", "moe_router", "moe_preprocess"]', "partial", None, False),
    ('["moe_router", "moe_preprocess"]', "partial", "moe_router,moe_preprocess", False),
    ('["attn", "mlp"]', "partial", "attn", True),
    ('["mlp"]', "none", None, True),
    ('["full_iteration"]', "full", None, False),
])
def test_megatron_cuda_graph_scope_becomes_the_plans(tmp_path: Path, scope: str, graphs: str, captured: str | None,
                                                     noted: bool) -> None:
    """Megatron-Bridge's per-GPU presets capture different Transformer Engine scopes (v0.4.x Qwen3-30B: B200 attn,
    moe_router, moe_preprocess; B300 and GB200 MXFP8 only moe_router, moe_preprocess): the plan keeps which."""
    path = tmp_path / "r.yaml"
    path.write_text(f"model:\n  cuda_graph_impl: transformer_engine\n  cuda_graph_scope: {scope}\n")
    cfg = import_config(path, "megatron")
    assert cfg.fields["cuda_graphs"] == graphs
    assert cfg.fields.get("cuda_graph_scope") == captured
    assert any("cuda_graph_scope mlp is not modelled" in n for n in cfg.notes) == noted


@pytest.mark.parametrize(("model_yaml", "graphs", "captured"), [
    ("cuda_graph_impl: full_iteration\n  cuda_graph_modules: []", "full", None),  # Megatron-Bridge 26.06+ presets
    ("cuda_graph_impl: full_iteration", "full", None),
    ("cuda_graph_impl: local\n  cuda_graph_scope: full_iteration", "full", None),  # the older spelling
    ("cuda_graph_impl: transformer_engine\n  cuda_graph_modules: [moe_router, moe_preprocess]", "partial",
     "moe_router,moe_preprocess"),
    ("cuda_graph_impl: transformer_engine\n  cuda_graph_modules: full", "partial", None),  # deprecated "full"
])
def test_megatron_core_018_cuda_graph_spellings(tmp_path: Path, model_yaml: str, graphs: str,
                                                captured: str | None) -> None:
    """Megatron-Core 0.18 names full-iteration graphs ``cuda_graph_impl: full_iteration`` and the per-layer scope list
    ``cuda_graph_modules`` (``cuda_graph_scope`` deprecated); the presets of Megatron-Bridge 26.06 and later use them."""
    path = tmp_path / "r.yaml"
    path.write_text(f"model:\n  {model_yaml}\n")
    cfg = import_config(path, "megatron")
    assert cfg.fields["cuda_graphs"] == graphs
    assert cfg.fields.get("cuda_graph_scope") == captured


def test_megatron_cuda_graph_modules_and_scope_that_disagree_are_refused(tmp_path: Path, capsys) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("model:\n  cuda_graph_impl: transformer_engine\n  cuda_graph_modules: [attn]\n"
                    "  cuda_graph_scope: [moe_router]\n")
    assert predict_main(["--from-megatron", str(path), "--gpu", "gb200", "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert "cuda_graph_modules" in err and "cuda_graph_scope" in err and "Traceback" not in err


@pytest.mark.parametrize(("precision", "head_fp8", "noted"), [
    ("bf16_with_mxfp8_mixed", True, False),
    ("bf16_mixed", False, True),
])
def test_megatron_fp8_output_proj_puts_the_lm_head_in_mxfp8_only(tmp_path: Path, precision: str, head_fp8: bool,
                                                                noted: bool) -> None:
    """Megatron-Core's output layer runs in BF16 unless ``fp8_output_proj`` (an MXFP8-only switch)."""
    path = tmp_path / "r.yaml"
    path.write_text(f"mixed_precision: {precision}\nmodel:\n  fp8_output_proj: true\n")
    cfg = import_config(path, "megatron")
    assert cfg.fields["fp8_output_proj"] is head_fp8
    assert any("fp8_output_proj applies to MXFP8 only" in n for n in cfg.notes) == noted


@pytest.mark.parametrize(("precision", "fp8_attn", "noted"), [
    ("bf16_with_mxfp8_mixed", True, False),
    ("bf16_mixed", False, True),
])
def test_megatron_fp8_dot_product_attention_needs_an_fp8_recipe(tmp_path: Path, precision: str, fp8_attn: bool,
                                                                noted: bool) -> None:
    """``mixed_precision.fp8_dot_product_attention`` (MLPerf's ``FP8_DPA``) puts the attention core in FP8 inside an
    FP8 recipe; under BF16 it is noted and the attention simulated in BF16."""
    path = tmp_path / "r.yaml"
    path.write_text(f"mixed_precision: {precision}\nmodel:\n  fp8_dot_product_attention: true\n")
    cfg = import_config(path, "megatron")
    assert cfg.fields["fp8_attention"] is fp8_attn
    assert any("fp8_dot_product_attention runs inside an FP8 recipe only" in n for n in cfg.notes) == noted


@pytest.mark.parametrize(("precision", "fused", "note"), [
    ("bf16_with_mxfp8_mixed", True, "simulated as Transformer Engine's fused grouped MLP"),
    ("bf16_mixed", False, "fuses the grouped MLP under MXFP8 only"),
])
def test_megatron_op_fuser_becomes_the_fused_grouped_mlp_under_mxfp8(tmp_path: Path, precision: str, fused: bool,
                                                                    note: str) -> None:
    """``use_transformer_engine_op_fuser`` (Megatron-Bridge's presets set it with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1)
    runs the experts as TE's fused grouped MLP under MXFP8; under another recipe TE does not fuse them (noted)."""
    path = tmp_path / "r.yaml"
    path.write_text(f"mixed_precision: {precision}\nmodel:\n  use_transformer_engine_op_fuser: true\n")
    cfg = import_config(path, "megatron")
    assert cfg.fields["fused_grouped_mlp"] is fused
    assert any(note in n for n in cfg.notes)
    assert not any("use_transformer_engine_op_fuser" in key for key in cfg.ignored)


@pytest.mark.parametrize(("enable", "components", "compiled"), [("true", '["model", "loss"]', True),
                                                                 ("true", '["loss"]', False),
                                                                 ("false", '["model", "loss"]', False)])
def test_torchtitan_compile_scope_becomes_the_plans(tmp_path: Path, enable: str, components: str,
                                                   compiled: bool) -> None:
    """TorchTitan compiles the model's blocks only with ``compile.enable`` and ``"model"`` in ``compile.components``
    (the 16B tomls of late 2025 compiled the loss alone): otherwise the plan's blocks launch eagerly."""
    text = (EXAMPLES / "torchtitan-dsv3-671b.toml").read_text()
    path = tmp_path / "job.toml"
    path.write_text(text.replace('enable = true\ncomponents = ["model", "loss"]',
                                 f"enable = {enable}\ncomponents = {components}"))
    fields = plan_fields(import_config(path, "torchtitan"), 256)
    assert fields.get("compile_model", True) is compiled
    assert plan_from_mapping(fields).compile_model is compiled


def test_megatron_cp_comm_type_becomes_the_plans(tmp_path: Path) -> None:
    """``model.cp_comm_type`` (Megatron-Core: p2p ring attention or a2a Ulysses all-to-alls) is the plan's when
    context parallelism is on; a value moesim does not simulate is refused naming the key."""
    path = tmp_path / "r.yaml"
    path.write_text("model:\n  context_parallel_size: 2\n  cp_comm_type: a2a\n")
    assert import_config(path, "megatron").fields["cp_comm_type"] == "a2a"
    path.write_text("model:\n  context_parallel_size: 2\n  cp_comm_type: a2a+p2p\n")
    with pytest.raises(ConfigError, match="cp_comm_type"):
        import_config(path, "megatron")
    path.write_text("model:\n  cp_comm_type: a2a\n")  # named without context parallelism: nothing to exchange
    assert "cp_comm_type" not in import_config(path, "megatron").fields


def test_megatron_bucket_size_becomes_the_plans_and_megatron_fsdp_is_noted(tmp_path: Path) -> None:
    """``ddp.bucket_size`` (a recipe's distributed-optimizer bucket, MLPerf's BUCKET_SIZE) is the plan's
    ``ddp_bucket_params``; ``use_megatron_fsdp`` is read and noted (simulated as the distributed optimizer); a
    bucket below 1e6 parameters is refused by the plan, naming the field."""
    path = tmp_path / "r.yaml"
    path.write_text("ddp:\n  bucket_size: 768000000\n  use_megatron_fsdp: true\n")
    cfg = import_config(path, "megatron")
    assert cfg.fields["ddp_bucket_params"] == 768e6
    assert any("use_megatron_fsdp" in n for n in cfg.notes)
    assert not any("bucket_size" in key or "use_megatron_fsdp" in key for key in cfg.ignored)
    assert plan_from_mapping(cfg.fields).ddp_bucket_params == 768e6
    path.write_text("ddp:\n  bucket_size: 1000\n")
    with pytest.raises(ConfigError, match="ddp_bucket_params"):
        plan_from_mapping(import_config(path, "megatron").fields)


def test_megatron_token_capacities_become_the_plans(tmp_path: Path) -> None:
    """``moe_expert_capacity_factor`` and ``moe_pad_expert_input_to_capacity`` are the plan's per-expert capacity
    and padding; ``moe_expert_rank_capacity_factor`` is HybridEP's receive budget (noted, not simulated, on
    another dispatcher); padding without a capacity and a malformed factor are refused, naming the key."""
    path = tmp_path / "r.yaml"
    path.write_text("model:\n  moe_expert_capacity_factor: 1.5\n  moe_pad_expert_input_to_capacity: true\n")
    cfg = import_config(path, "megatron")
    assert cfg.fields["expert_capacity_factor"] == 1.5 and cfg.fields["pad_to_capacity"] is True
    plan = plan_from_mapping(cfg.fields)
    assert plan.expert_capacity_factor == 1.5 and plan.pad_to_capacity
    assert not any("capacity" in key for key in cfg.ignored)
    path.write_text("model:\n  moe_token_dispatcher_type: flex\n  moe_flex_dispatcher_backend: hybridep\n"
                    "  moe_expert_rank_capacity_factor: 5\n")
    assert import_config(path, "megatron").fields["ep_rank_capacity_factor"] == 5.0
    path.write_text("model:\n  moe_expert_rank_capacity_factor: 5\n")
    cfg = import_config(path, "megatron")
    assert "ep_rank_capacity_factor" not in cfg.fields
    assert any("moe_expert_rank_capacity_factor" in n for n in cfg.notes)
    path.write_text("model:\n  moe_pad_expert_input_to_capacity: true\n")
    with pytest.raises(ConfigError, match="moe_pad_expert_input_to_capacity"):
        import_config(path, "megatron")
    path.write_text("model:\n  moe_expert_capacity_factor: fast\n")
    with pytest.raises(ConfigError, match="moe_expert_capacity_factor = 'fast'"):
        import_config(path, "megatron")
    path.write_text("model:\n  moe_expert_capacity_factor: null\n")
    assert "expert_capacity_factor" not in import_config(path, "megatron").fields
    path.write_text("model:\n  moe_router_force_load_balancing: false\n  moe_expert_capacity_factor: 1.25\n")
    cfg = import_config(path, "megatron")
    assert cfg.fields["routing"] == "balanced"
    assert any("routing is simulated balanced" in n and "collapse:<experts per EP rank>" in n for n in cfg.notes)
