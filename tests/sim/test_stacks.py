"""Stack profiles: the named data files, the strict loader, efficiencies in op times, placement, CLI errors."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import pytest

from sim.catalog import load_cluster, load_gpu, load_model
from sim.costs import default_costs
from sim.errors import ConfigError
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.stacks import (
    OP_CLASSES,
    STACK_ALIASES,
    StackProfile,
    default_stack,
    load_stack,
    stack_names,
)
from sim.workload import OpSpec

BUILTIN = ("torchtitan", "megatron-26.02", "megatron-26.04", "deepseek")
IMPL_FIELDS = [f.name for f in dataclasses.fields(StackProfile)
               if f.name not in ("name", "release", "provenance", "efficiency", "sources")]


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_value_has_a_source(name: str) -> None:
    stack = load_stack(name)
    assert stack.name == name and stack.release and stack.provenance
    for field in IMPL_FIELDS:
        assert stack.sources.get(field), f"{name}: {field} has no source"
    for arch in stack.efficiency:
        assert stack.sources.get(f"efficiency.{arch}")


def test_names_aliases_and_default() -> None:
    assert set(BUILTIN) | set(STACK_ALIASES) == set(stack_names())
    assert load_stack("megatron") is load_stack("megatron-26.04")
    assert load_stack(None) is default_stack() is load_stack("torchtitan")
    from sim.joint import (
        shipped_values,  # the release's one scalar, fitted jointly and mirrored in its file
    )

    assert load_stack("torchtitan").eff("sm100", "grouped_gemm") == pytest.approx(
        shipped_values()["release.torchtitan"], abs=5e-5)


def test_implementation_choices_differ_by_framework() -> None:
    tt, mc, ds = load_stack("torchtitan"), load_stack("megatron"), load_stack("deepseek")
    assert (tt.force_balance, mc.force_balance) == ("round-robin", "random")
    assert (tt.param_sharding, mc.param_sharding, ds.param_sharding) == ("fsdp", "zero1", "zero1")
    assert (tt.quantize_weights, mc.quantize_weights) == ("per_call", "per_step")
    assert mc.fused_act_quant and not tt.fused_act_quant
    assert set(mc.recompute_modules) == {"mla_up_proj", "mlp", "moe_act"} and tt.recompute_modules == ()
    assert ds.moment_bytes == 4 and tt.moment_bytes == 8
    assert mc.nvlink_domain_ranks == 64 and load_stack("megatron-26.02").launch == mc.launch == "eager"  # fitted B200 presets: no graphs


def test_efficiency_fallbacks() -> None:
    s = StackProfile(efficiency={"*": {"default": 0.5}, "sm100": {"grouped_gemm": 0.8, "default": 0.7}})
    assert s.eff("sm100", "grouped_gemm") == 0.8
    assert s.eff("sm100", "attn.bwd") == 0.7
    assert s.eff("sm90", "mem") == 0.5
    assert StackProfile().eff("sm90", "mem") == 1.0


def test_op_seconds_divides_by_the_class_efficiency_and_adds_the_launch_gap() -> None:
    gpu = load_gpu("b200")
    costs = default_costs(gpu)
    op = OpSpec("x", "gemm", flops=1e12, gemm_pass="wgrad")
    kernel = costs.gemm_time(1e12, gpu.bf16_flops)
    s = StackProfile(efficiency={"sm100": {"gemm.wgrad": 0.25, "default": 1.0}}, kernel_overhead_s=3e-6)
    assert costs.op_seconds(op, gpu, s) == pytest.approx(kernel / 0.25 + 3e-6, rel=1e-12)
    assert costs.op_seconds(dataclasses.replace(op, gemm_pass="fwd"), gpu, s) == pytest.approx(kernel + 3e-6)
    tt = load_stack("torchtitan")  # a shipped profile is one KernelRates
    assert costs.op_seconds(op, gpu, tt) == pytest.approx(kernel / tt.eff("sm100", "gemm.wgrad") + tt.kernel_overhead_s)


def test_attention_takes_the_sfu_bound_when_longer() -> None:
    gpu = dataclasses.replace(load_gpu("b300"), exp_per_s=1e9)  # absurdly slow SFUs: exp bound
    costs = default_costs(gpu)
    op = OpSpec("attn.core", "attn", flops=1e12, elems=1e9)
    assert costs.op_seconds(op, gpu, StackProfile(kernel_overhead_s=0.0)) == pytest.approx(1.0 / costs.softmax_eff)
    fast = dataclasses.replace(gpu, exp_per_s=1e15)
    assert costs.op_seconds(op, fast, StackProfile(kernel_overhead_s=0.0)) == pytest.approx(
        1e12 / (gpu.bf16_flops * costs.attn_fwd_eff))


def test_predict_follows_the_stack_efficiency() -> None:
    model, cluster = load_model("debug"), load_cluster("hgx-b200", n_gpus=8)
    plan = ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512)
    # NCCL holding no SMs: compute beside the FSDP prefetch runs at its own speed, so only the efficiency moves it
    costs = dataclasses.replace(default_costs(load_gpu("b200")), comm={"nccl_channels": 0})
    slow = predict(model, cluster, plan, costs,
                   stack=StackProfile(efficiency={"*": {"default": 0.25}}, kernel_overhead_s=0))
    fast = predict(model, cluster, plan, costs,
                   stack=StackProfile(efficiency={"*": {"default": 1.0}}, kernel_overhead_s=0))
    cs, cf = (sum(v for k, v in p.breakdown.items() if k.startswith("compute.")) for p in (slow, fast))
    assert slow.step_time_s > fast.step_time_s
    assert cs / cf == pytest.approx(4.0, rel=1e-6)  # every kernel 4x (no launch gaps here)
    assert predict(model, cluster, plan, stack="megatron").stack == "megatron-26.04"


def test_megatron_places_64_ranks_per_nvl72_rack() -> None:
    rack = load_cluster("gb200-nvl72", n_gpus=256)
    assert load_stack("megatron").place(rack).nvlink_domain_gpus == 64
    assert load_stack("torchtitan").place(rack).nvlink_domain_gpus == 72
    hgx = load_cluster("hgx-b200", n_gpus=256)
    assert load_stack("megatron").place(hgx) is hgx


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, needle", [
    ('[stack]\nbase = "megatron"\nfoo = 1\n', "unknown key(s) foo"),
    ('[stack]\nbase = "megatron"\n[extra]\n', "unknown table(s) extra"),
    ('[stack]\nname = "x"\n', "missing key(s) release"),
    ('[stack]\nbase = "megatron"\nfused_act_quant = "yes"\n', "fused_act_quant must be true or false, got 'yes'"),
    ('[stack]\nbase = "megatron"\ngrad_bytes = true\n', "grad_bytes must be an integer, got True"),
    ('[stack]\nbase = "megatron"\nhost_sync_s = nan\n', "host_sync_s must be a finite number, got nan"),
    ('[stack]\nbase = "megatron"\nlaunch = "warp"\n', "launch must be one of eager, compiled, cuda_graphs; got 'warp'"),
    ('[stack]\nbase = "megatron"\nrecompute_modules = ["attn"]\n', "unknown module 'attn'"),
    ('[stack]\nbase = "megatron"\n[efficiency.sm100]\ngemm.fwd = 2.0\n', "efficiency.sm100"),
    ('[stack]\nbase = "megatron"\n[efficiency.sm100]\nconv = 0.5\n', "unknown op class 'conv'"),
    ('[stack]\nbase = "nope"\n', "base must be the name of a built-in stack"),
    ('[stack]\nbase = "megatron"\ngrad_bytes = 0\n', "grad_bytes must be an integer in 1..256, got 0"),
    ('[stack]\nbase = "megatron"\nsaved_act_bytes = { "moe.fc1_out" = 9 }\n', "saved_act_bytes.moe.fc1_out"),
    ("[stack\n", "malformed TOML"),
])
def test_bad_stack_files_name_file_field_and_value(tmp_path, text: str, needle: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_stack(path)
    assert needle in str(err.value)
    assert "s.toml" in str(err.value)


def test_a_user_file_overrides_a_builtin(tmp_path) -> None:
    path = _write(tmp_path, '[stack]\nbase = "megatron"\nname = "mine"\n[efficiency.sm100]\ngrouped_gemm = 0.9\n')
    s = load_stack(path)
    assert s.name == "mine" and s.param_sharding == "zero1"
    assert s.eff("sm100", "grouped_gemm") == 0.9 and s.eff("sm100", "attn.fwd") == load_stack("megatron").eff(
        "sm100", "attn.fwd")


def test_unknown_name_lists_the_builtins() -> None:
    with pytest.raises(ConfigError, match="unknown stack 'titan'; built in: deepseek, megatron"):
        load_stack("titan")


@pytest.mark.parametrize("args", [["--stack", "nope"], ["--stack", "/no/such/stack.toml"]])
def test_cli_bad_stack_exits_2_with_one_line(args: list[str]) -> None:
    out = subprocess.run([sys.executable, "-m", "moesim", "predict", *args], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr and "stack" in out.stderr


def test_cli_bad_stack_file_exits_2(tmp_path) -> None:
    path = _write(tmp_path, '[stack]\nbase = "megatron"\nparam_sharding = "zero3"\n')
    out = subprocess.run([sys.executable, "-m", "moesim", "predict", "--stack", path], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "param_sharding" in out.stderr and "'zero3'" in out.stderr


def test_op_classes_cover_every_compute_kind() -> None:
    """Every compute op kind is timed under an op class a profile can name, and a separate quantize kernel is its
    own class (not ``mem``): a stack's ``quant`` entry moves it, its ``mem`` entry does not."""
    from sim.workload import OpSpec

    gpu = load_gpu("b200")
    costs = default_costs(gpu)
    quant = OpSpec("q", "quant", elems=1e9)
    def seconds(efficiency: dict[str, dict[str, float]]) -> float:
        return costs.op_seconds(quant, gpu, StackProfile(efficiency=efficiency, kernel_overhead_s=0.0))

    base = seconds({})
    assert seconds({"*": {"quant": 0.5}}) == pytest.approx(2 * base)
    assert seconds({"*": {"mem": 0.5}}) == pytest.approx(base)
    assert set(OP_CLASSES) >= {"mem", "quant", "grouped_gemm"} and not math.isnan(load_stack("deepseek").eff("sm90", "mem"))


def test_scenario_stack_key_and_override(tmp_path) -> None:
    from sim.scenarios import load_scenario, run_scenario

    assert load_scenario("dsv3-671b-b200").stack == "torchtitan"
    f = tmp_path / "sc.toml"
    f.write_text('[scenario]\nmodel = "debug"\ngpus = 8\nstack = "megatron"\n[base]\nep = 4\nseq_len = 256\n')
    sc = load_scenario(str(f))
    (pred,) = run_scenario(sc)
    assert pred.stack == "megatron-26.04"
    (pred,) = run_scenario(sc, stack="deepseek")
    assert pred.stack == "deepseek"
    f.write_text('[scenario]\nmodel = "debug"\ngpus = 8\nstack = 3\n')
    with pytest.raises(ConfigError, match="stack must be a stack profile name or file, got 3"):
        load_scenario(str(f))


def test_gpu_flag_picks_the_gpus_template(capsys) -> None:
    import json

    from moesim.predict_cmd import main

    assert main(["--model", "debug", "--gpu", "gb200", "--gpus", "8", "--ep", "4", "--json"]) == 0
    pred = json.loads(capsys.readouterr().out)["predictions"][0]
    assert pred["gpu"] == "gb200" and pred["stack"] == "torchtitan"
    from sim.catalog import default_cluster

    assert default_cluster("gb200") == "gb200-nvl72" and default_cluster("gb300") == "gb300-nvl72"
    assert load_cluster(default_cluster("gb300")).nic_bw_bytes_per_s == 800e9 / 8


def test_blackwell_ultra_is_its_own_architecture() -> None:
    b200, b300 = load_gpu("b200"), load_gpu("b300")
    # the product's CUDA device property: 148 SMs like a B200 (152 on GB300), not the full chip's 160
    assert (b300.arch, b300.num_sms, b300.hbm_bw_bytes_per_s) == ("sm103", 148, 8e12)
    assert load_gpu("gb300").num_sms == load_gpu("gb200").num_sms == 152
    assert b300.hbm_bytes > 1.5 * b200.hbm_bytes and b300.exp_per_s > 2 * b200.exp_per_s
    assert load_gpu("gb300").arch == "sm103"


def test_a_legacy_calibration_with_a_stack_is_refused() -> None:
    import json

    from sim.costs import CostModel

    data = json.loads(default_costs(load_gpu("b200")).to_json())
    assert "stack" not in data
    data["stack"] = {"compute_scale": 0.5}
    with pytest.raises(ConfigError, match="field 'stack' is no longer part of a calibration"):
        CostModel.from_dict(data)


def test_the_slowest_ep_group_decides_and_64_per_rack_avoids_straddling() -> None:
    from sim.layout import Layout
    from sim.placement import distinct_ep_groups

    model = load_model("deepseek-v3-16b")
    rack = load_cluster("gb200-nvl72", n_gpus=256)
    plan = ParallelPlan(pp=4, ep=64, dp_shard=64, global_batch=256, seq_len=4096, ep_backend="deepep")
    groups = distinct_ep_groups(Layout(plan), rack)
    assert groups[0] == list(range(64)) and len(groups) > 1  # ranks 64..127 straddle racks 0 and 1
    # two copies of the profile that differ in placement only (a changed copy keeps its file's numbers, so the
    # shipped profile itself, which takes the joint step boundary, is not one of them)
    mc = dataclasses.replace(load_stack("megatron"), name="megatron-copy")
    placed = predict(model, rack, plan, stack=mc)
    straddling = predict(model, rack, plan, stack=dataclasses.replace(mc, nvlink_domain_ranks=0))
    assert placed.tokens_per_s_per_gpu > 1.2 * straddling.tokens_per_s_per_gpu
    assert straddling.breakdown["comm.a2a"] > placed.breakdown["comm.a2a"]


def test_per_step_weight_quantisation_lands_in_the_step_tail() -> None:
    from sim.workload import Workload

    model, cluster = load_model("debug"), load_cluster("hgx-b200", n_gpus=8)
    plan = ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512, precision="mxfp8")
    te = dataclasses.replace(load_stack("megatron"), name="te")  # a user's copy: its own launch costs on both sides
    per_call = dataclasses.replace(te, quantize_weights="per_call")
    a, b = predict(model, cluster, plan, stack=te), predict(model, cluster, plan, stack=per_call)
    costs, gpu = default_costs(cluster.gpu), cluster.gpu
    step = sum(costs.op_seconds(op, gpu, te) for op in Workload(model, plan, te).step_ops())
    assert step > 0
    assert a.breakdown["optimizer"] - b.breakdown["optimizer"] == pytest.approx(step, rel=1e-9)


def test_a_builtin_profile_must_source_every_value() -> None:
    """Built-in profiles carry a source for every implementation field; one without fails to load."""
    import tomllib
    from pathlib import Path

    from sim.stacks import _from_data

    path = Path(__file__).resolve().parents[2] / "sim" / "stack_profiles" / "torchtitan.toml"
    data = tomllib.loads(path.read_text())
    _from_data("torchtitan.toml", data, builtin=True)
    key = next(k for k in data["sources"] if not k.startswith("efficiency"))
    del data["sources"][key]
    with pytest.raises(ConfigError, match=key):
        _from_data("torchtitan.toml", data, builtin=True)


def test_catalog_lists_every_cluster_template() -> None:
    from sim.catalog import cluster_names

    names = cluster_names()
    assert {"hgx-b200", "hgx-h100", "gb200-nvl72", "h800-deepseek"} <= set(names)
    for n in names:
        load_cluster(n)


@pytest.mark.parametrize("field, value", [("param_sharding", "zero3"), ("force_balance", "magic"),
                                          ("quantize_weights", "never")])
def test_bad_choices_name_the_field(field: str, value: str) -> None:
    from sim.stacks import StackProfile

    with pytest.raises(ConfigError, match=f"{field}"):
        StackProfile(**{field: value})
