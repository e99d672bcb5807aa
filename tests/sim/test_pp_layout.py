"""Pipeline layouts in Megatron-Core's syntax (sim.pp_layout): the DeepSeek-V3 recipes' uneven chunks, with
the MTP module and the loss in a light last chunk, and every malformed layout refused by name."""

from __future__ import annotations

import dataclasses

import pytest

from moesim.cli import main
from sim.accounting import stage_layers
from sim.catalog import load_cluster, load_model
from sim.errors import ConfigError, PlanError
from sim.pp_layout import check_layout, decoders_per_chunk, mtp_modules, split_layers
from sim.predict import predict
from sim.predict.memo import SimMemo
from sim.specs import ParallelPlan
from sim.workload import chunk_layers

RECIPE_16 = "Et*4|(t*4|)*14tmL"  # Megatron-Bridge (16, 1) and (4, 4); the GB300 preset's pp_layout
RECIPE_8 = "Et*8|(t*8|)*6t*5mL"  # (8, 1)


def test_the_recipe_layouts_expand_to_their_chunks() -> None:
    assert decoders_per_chunk(RECIPE_16) == [4] * 15 + [1]
    assert decoders_per_chunk(RECIPE_8) == [8] * 7 + [5]
    assert mtp_modules(RECIPE_16) == mtp_modules(RECIPE_8) == 1
    assert decoders_per_chunk("Et|(tt|)*30mL") == [1] + [2] * 30 + [0]
    assert split_layers(61, 16, RECIPE_16)[-1] == [60]
    assert split_layers(10, 4) == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]


@pytest.mark.parametrize(("layout", "why"), [
    ("Et*4|(t*4|)*14tmQ", "unknown symbol 'Q'"),
    ("Et*4|(t*4|*14tmL", "unclosed '('"),
    ("Et*|tmL", "needs a repeat count"),
    ("Et)|tmL", "unmatched ')'"),
    ("(t*1000)*1000", "expands past"),
    ("t" * 2001, "at most 2000 characters"),
])
def test_malformed_layouts_name_the_field_and_the_value(layout: str, why: str) -> None:
    with pytest.raises(ConfigError, match=r"plan: pp_layout") as err:
        ParallelPlan(pp=16, pp_layout=layout)
    assert why in str(err.value)


@pytest.mark.parametrize(("layout", "why"), [
    ("Et*4|(t*4|)*13tmL", "has 15 chunks; the plan has 16"),
    ("Et*4|(t*4|)*14ttmL", "places 62 decoder layers; the model has 61"),
    ("t*4|E(t*4|)*14tmL", "the embedding (E) must open the first chunk"),
    ("Et*4L|(t*4|)*14tm", "must close the last chunk"),
    ("Et*4|(t*4|)*14tL", "places 0 MTP modules"),
])
def test_layouts_that_do_not_fit_the_model_are_refused(layout: str, why: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_layout(layout, n_chunks=16, n_layers=61, mtp_layers=1)
    assert why in str(err.value)


def test_dualpipe_places_its_own_chunks() -> None:
    with pytest.raises(ConfigError, match="dualpipe places its own"):
        ParallelPlan(pp=16, pp_schedule="dualpipe", pp_layout=RECIPE_16)


def test_a_bad_layout_on_the_command_line_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "--model", "deepseek-v3-671b", "--gpu", "b200", "--gpus", "256", "--stack", "megatron",
            "--pp", "16", "--ep", "8", "--global-batch", "4096", "--precision", "mxfp8", "--pp-layout", RECIPE_16]
    assert main(args) == 2  # the layout has an MTP module; the megatron stack does not train MTP by default
    err = capsys.readouterr().err
    assert "pp_layout" in err and "mtp_layers" in err and "Traceback" not in err


@pytest.fixture(scope="module")
def b200() -> tuple:  # type: ignore[type-arg]
    model, cluster = load_model("deepseek-v3-671b"), load_cluster("hgx-b200", n_gpus=256)
    plan = ParallelPlan(pp=16, ep=8, dp_shard=16, global_batch=4096, ac="selective", recompute_modules="mla_up_proj",
                        precision="mxfp8", ep_backend="hybridep", deepep_sms=32)
    return model, cluster, plan


def test_the_recipe_layout_puts_mtp_in_a_light_last_stage(b200: tuple) -> None:  # type: ignore[type-arg]
    """Megatron-Bridge's DeepSeek-V3 layout gives the last stage 1 layer beside the MTP module and the loss,
    so training MTP costs little more than its FLOPs (that stage's two BF16 output heads, 0.93 G parameters each,
    make it a little heavier than four MXFP8 layers); the even split puts it on a full stage, which then paces
    every microbatch."""
    model, cluster, plan = b200
    tps = {name: predict(model, cluster, p, stack="megatron").tokens_per_s_per_gpu for name, p in {
        "no mtp": plan,
        "mtp, even": dataclasses.replace(plan, mtp_layers=1),
        "mtp, recipe": dataclasses.replace(plan, mtp_layers=1, pp_layout=RECIPE_16),
    }.items()}
    assert 0.9 * tps["no mtp"] < tps["mtp, recipe"] < tps["no mtp"]
    assert tps["mtp, even"] < 0.85 * tps["mtp, recipe"]
    laid = dataclasses.replace(plan, mtp_layers=1, pp_layout=RECIPE_16)
    assert stage_layers(model, laid)[-1] == [60] and chunk_layers(model, laid)[0] == [0, 1, 2, 3]


def test_a_memo_shared_by_layouts_changes_nothing(b200: tuple) -> None:  # type: ignore[type-arg]
    model, cluster, plan = b200
    plans = [dataclasses.replace(plan, mtp_layers=1, pp_layout=lay) for lay in (RECIPE_16, "")]
    memo = SimMemo()
    shared = [predict(model, cluster, p, stack="megatron", memo=memo).step_time_s for p in plans]
    alone = [predict(model, cluster, p, stack="megatron").step_time_s for p in plans]
    assert shared == alone and shared[0] != shared[1]


def test_predict_refuses_a_layout_for_another_model(b200: tuple) -> None:  # type: ignore[type-arg]
    _, cluster, plan = b200
    qwen = load_model("qwen3-235b-a22b")
    with pytest.raises(PlanError, match="decoder layers; the model has 94"):
        predict(qwen, cluster, dataclasses.replace(plan, pp_layout="Et*4|(t*4|)*14tL", ep_backend="nccl"),
                stack="megatron")
