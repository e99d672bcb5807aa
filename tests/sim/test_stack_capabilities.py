"""Issue 28.5: each stack profile states the schedules, EP backends and precisions it can run (every list
sourced); ``moesim predict``, ``moesim plan`` and ``moesim study capacity`` refuse the rest in one line that
names the stack, the field, the value and what the stack runs; the plan search never proposes it; scenario
rows are named after the overrides that change them."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from moesim.cli import main
from sim.catalog import load_cluster, load_model
from sim.errors import ConfigError
from sim.scenarios import load_scenario, run_scenario, variant_name
from sim.specs import EP_BACKENDS, PP_SCHEDULES, PRECISIONS, ParallelPlan
from sim.stacks import CAPABILITIES, STACK_SCHEDULES, StackProfile, load_stack
from studies.capacity import run_sweep
from studies.capacity_spec import spec_from_mapping
from studies.search import PlanSpace, enumerate_plans, search

BUILTIN = ("torchtitan", "megatron-26.02", "megatron-26.04", "deepseek")


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("name", BUILTIN)
def test_every_profile_lists_what_it_runs_with_a_source(name: str) -> None:
    stack = load_stack(name)
    for capability, (_field, known) in CAPABILITIES.items():
        values = getattr(stack, capability)
        assert values and set(values) <= set(known), (name, capability, values)
        assert len(stack.sources[capability]) > 40, (name, capability)
    assert stack.can_run("pp_schedules") and set(stack.can_run("pp_schedules")) <= set(PP_SCHEDULES)


def test_the_frameworks_differ_as_their_code_says() -> None:
    tt, mc, ds = load_stack("torchtitan"), load_stack("megatron"), load_stack("deepseek")
    assert "hybridep" not in tt.ep_backends and "hybridep" in mc.ep_backends
    assert {"dualpipe", "dualpipev"}.isdisjoint(mc.pp_schedules) and "dualpipe" in ds.pp_schedules
    assert "dualpipev" in tt.pp_schedules and "dualpipe" not in tt.pp_schedules
    assert {"gpipe", "zbv"} <= set(tt.pp_schedules) and set(STACK_SCHEDULES) > set(PP_SCHEDULES)
    assert "mxfp8-grouped" in tt.precisions and "mxfp8-grouped" not in mc.precisions
    assert ds.ep_backends == ("deepep",) and "fp8-blockwise" in ds.precisions


def test_refusal_names_the_stack_the_field_the_value_and_what_it_runs() -> None:
    tt, mc = load_stack("torchtitan"), load_stack("megatron")
    assert tt.refusal(ParallelPlan(ep=8, ep_backend="hybridep")) == (
        "stack torchtitan cannot run ep_backend 'hybridep'; it runs nccl, deepep")
    assert mc.refusal(ParallelPlan(pp=2, pp_schedule="dualpipe", ep=8, precision="mxfp8")) == (
        "stack megatron-26.04 cannot run pp_schedule 'dualpipe'; it runs 1f1b, interleaved-1f1b")
    assert mc.refusal(ParallelPlan(ep=8, precision="mxfp8-grouped")) is not None
    assert load_stack("deepseek").refusal(ParallelPlan(pp=1, ep=8, ep_backend="deepep")) is None  # no pipeline
    assert mc.refusal(ParallelPlan(pp=2, pp_schedule="interleaved-1f1b", vpp=2, ep=8, precision="mxfp8",
                                   ep_backend="hybridep", ep_overlap=True)) is None


def test_bad_capability_lists_are_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"ep_backends must list one or more of .*'mpi'"):
        StackProfile(ep_backends=("mpi",))
    with pytest.raises(ConfigError, match="pp_schedules"):
        StackProfile(pp_schedules=())
    assert set(EP_BACKENDS) >= set(StackProfile().ep_backends) and set(PRECISIONS) >= set(StackProfile().precisions)


def test_a_user_profile_can_widen_what_its_base_runs(tmp_path: Path) -> None:
    path = tmp_path / "titan-hybridep.toml"
    path.write_text('[stack]\nbase = "torchtitan"\nep_backends = ["nccl", "deepep", "hybridep"]\n')
    assert load_stack(str(path)).refusal(ParallelPlan(ep=8, ep_backend="hybridep")) is None
    path.write_text('[stack]\nbase = "torchtitan"\nep_backends = "hybridep"\n')
    with pytest.raises(ConfigError, match=f"{path}.*ep_backends must be a list of names"):
        load_stack(str(path))


def test_predict_refuses_torchtitan_with_hybridep_in_one_line() -> None:
    code, out, err = _cli("predict", "--model", "deepseek-v3-16b", "--gpus", "16", "--ep", "8", "--dp-shard", "16",
                          "--ep-backend", "hybridep", "--global-batch", "32", "--seq-len", "1024")
    assert code == 2 and not out
    assert err.strip().splitlines() == [
        "moesim predict: error: stack torchtitan cannot run ep_backend 'hybridep'; it runs nccl, deepep"]


def test_predict_refuses_dualpipe_under_megatron_in_one_line() -> None:
    code, out, err = _cli("predict", "--model", "deepseek-v3-16b", "--gpus", "16", "--pp", "2", "--ep", "8",
                          "--dp-shard", "8", "--pp-schedule", "dualpipe", "--stack", "megatron", "--precision",
                          "mxfp8", "--global-batch", "32", "--seq-len", "1024")
    assert code == 2 and not out
    assert err.strip().splitlines() == [
        "moesim predict: error: stack megatron-26.04 cannot run pp_schedule 'dualpipe'; it runs 1f1b, interleaved-1f1b"]


def test_a_scenario_variant_the_stack_cannot_run_is_refused_naming_the_variant() -> None:
    code, out, err = _cli("predict", "--ep-backend", "hybridep")  # the seed scenario is TorchTitan's
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "variant 'bf16 (standard EP)': stack torchtitan cannot run ep_backend 'hybridep'" in err


@pytest.mark.parametrize(("extra", "needle"), [
    (("--ep-backend", "hybridep"), "stack torchtitan cannot run ep_backend 'hybridep'; it runs nccl, deepep"),
    (("--stack", "megatron", "--precision", "mxfp8-grouped"),
     "stack megatron-26.04 cannot run precision 'mxfp8-grouped'; it runs bf16, fp8-current, fp8-blockwise, mxfp8"),
])
def test_plan_refuses_what_the_stack_cannot_run(extra: tuple[str, ...], needle: str) -> None:
    code, out, err = _cli("plan", "--model", "deepseek-v3-16b", "--tokens", "1e11", "--days", "30", "--gpu", "b200",
                          "--no-progress", "--workers", "1", *extra)
    assert code == 2 and not out and err.strip().splitlines() == [f"moesim plan: error: {needle}"]


def test_the_plan_search_never_proposes_a_schedule_the_stack_lacks() -> None:
    model, cluster = load_model("debug"), load_cluster("hgx-b200", n_gpus=16)
    space = PlanSpace(tp=(1,), pp=(2, 4), schedules=PP_SCHEDULES, vpp=(2,), ep=(4,), ac=("full",), micro_batch=(1,),
                      seq_len=512, global_batch=64, precision="bf16", ep_backend="deepep")
    every = {p.pp_schedule for p in enumerate_plans(model, cluster, space)}
    megatron = {p.pp_schedule for p in enumerate_plans(model, cluster, space, stack="megatron")}
    assert {"dualpipe", "dualpipev"} <= every and megatron == {"1f1b", "interleaved-1f1b"}
    result = search(model, cluster, space, "megatron", keep=8)
    assert result.best is not None
    assert {c.plan.pp_schedule for c in [result.best, *result.runner_ups]} <= {"1f1b", "interleaved-1f1b"}
    with pytest.raises(ConfigError, match="stack torchtitan cannot run ep_backend 'hybridep'"):
        search(model, cluster, PlanSpace(tp=(1,), pp=(1,), ep=(4,), seq_len=512, global_batch=64,
                                         precision="bf16", ep_backend="hybridep"), "torchtitan")


def test_study_capacity_refuses_before_writing_anything(tmp_path: Path) -> None:
    spec = spec_from_mapping({"sweep": [{"models": ["deepseek-v3-16b"], "gpus": ["b200"], "gpu_counts": [64],
                                         "ep_backends": ["hybridep"]}]})
    with pytest.raises(ConfigError, match="stack torchtitan cannot run ep_backend 'hybridep'; it runs nccl, deepep"):
        run_sweep(spec, tmp_path / "out", workers=1)
    assert not (tmp_path / "out").exists()


def test_variant_names_follow_their_overrides() -> None:
    sc = load_scenario("dsv3-671b-b200")
    names = [variant_name(sc, v, {"ep_backend": "hybridep", "seq_len": 4096}) for v in sc.variants]
    assert names == ["bf16 (standard EP) with ep_backend=hybridep", "bf16 + DeepEP with ep_backend=hybridep",
                     "mxfp8 grouped + DeepEP with ep_backend=hybridep", "mxfp8 grouped (standard EP) with ep_backend=hybridep"]
    assert variant_name(sc, sc.variants[1], {"ep_backend": "deepep"}) == "bf16 + DeepEP"  # no change, same name
    assert [variant_name(sc, v, {"precision": "bf16"}) for v in sc.variants][2:] == [
        "mxfp8 grouped + DeepEP with precision=bf16", "mxfp8 grouped (standard EP) with precision=bf16"]


def test_scenario_rows_carry_the_override_in_their_names() -> None:
    sc = load_scenario("dsv3-671b-b200")
    small = type(sc)(sc.name, sc.description, "deepseek-v3-16b", sc.cluster, 16,
                     {**sc.base, "tp": 1, "pp": 1, "vpp": 1, "pp_schedule": "1f1b", "ep": 8, "dp_shard": 16,
                      "seq_len": 1024, "global_batch": 32}, sc.variants[:2], sc.stack)
    preds = run_scenario(small, stack="megatron", overrides={"ep_backend": "hybridep", "precision": "mxfp8"})
    # these two variants differ only in ep_backend: the precision override is in the title, not the names
    assert [p.name for p in preds] == ["bf16 (standard EP) with ep_backend=hybridep", "bf16 + DeepEP with ep_backend=hybridep"]
    assert all(p.plan["ep_backend"] == "hybridep" for p in preds)
