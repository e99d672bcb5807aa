"""What if (studies.what_if): measured runs predicted with joint parameters, stack fields and plan fields changed."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.predict import predict
from sim.stacks import profile_for
from studies.dataset import load_runs, resolve_run
from studies.what_if import main, plan_changes_from, what_if, what_if_markdown

SEED = "titan-dsv3-b200"


def test_no_change_is_the_shipped_prediction() -> None:
    rows = {r.id: r for r in what_if(select=[SEED])}
    run = next(r for r in load_runs() if r.id == "titan-dsv3-b200-bf16")
    model, cluster, plan = resolve_run(run)
    shipped = predict(model, cluster, plan, None, stack=profile_for(run.stack, run.release))
    assert rows[run.id].predicted == pytest.approx(shipped.tokens_per_s_per_gpu, rel=1e-12)
    assert rows[run.id].error == pytest.approx(shipped.tokens_per_s_per_gpu / 651 - 1)
    assert set(rows) == {"titan-dsv3-b200-bf16", "titan-dsv3-b200-bf16-deepep", "titan-dsv3-b200-mxfp8-deepep"}


def test_a_joint_parameter_moves_only_the_runs_it_applies_to() -> None:
    shipped = {r.id: r.predicted for r in what_if(select=["titan-dsv3-b200-bf16", "mcore-26.04-dsv3-256xb200"])}
    at_rates = {r.id: r.predicted for r in what_if(params={"release.torchtitan": 1.0},
                                                   select=["titan-dsv3-b200-bf16", "mcore-26.04-dsv3-256xb200"])}
    assert at_rates["titan-dsv3-b200-bf16"] > 1.1 * shipped["titan-dsv3-b200-bf16"]  # 0.507 -> 1: faster kernels
    assert at_rates["mcore-26.04-dsv3-256xb200"] == pytest.approx(shipped["mcore-26.04-dsv3-256xb200"], rel=1e-12)


def test_stack_and_plan_changes_apply_to_the_selected_runs_alone() -> None:
    base = {r.id: r.predicted for r in what_if(select=[SEED])}
    glue = {r.id: r.predicted for r in what_if(stacks={"torchtitan": {"indexed_accumulate": False}}, select=[SEED])}
    # TorchTitan's index kernels counted as bytes instead speed its DeepEP steps up (their scatter-adds), under the
    # same joint fit
    assert glue["titan-dsv3-b200-bf16-deepep"] > base["titan-dsv3-b200-bf16-deepep"]
    bigger = {r.id: r for r in what_if(plan={"micro_batch": 2}, select=["titan-dsv3-b200-bf16"])}
    assert bigger["titan-dsv3-b200-bf16"].predicted != pytest.approx(base["titan-dsv3-b200-bf16"], rel=1e-6)


def test_the_report_gives_errors_and_the_speedups_over_selected_baselines() -> None:
    lines = what_if_markdown(what_if(select=[SEED]), breakdown=True)
    text = "\n".join(lines)
    assert "| titan-dsv3-b200-bf16 | 651 |" in text
    assert "speedup titan-dsv3-b200-mxfp8-deepep over titan-dsv3-b200-bf16: predicted" in text
    assert "measured +41.0%" in text
    assert any("compute.moe.expert_gemm" in line for line in lines)  # the breakdown rows
    # a baseline not selected gives no speedup line
    assert not any(line.startswith("speedup") for line in what_if_markdown(what_if(select=["mxfp8"])))


def test_plan_values_are_typed_and_bad_fields_are_named() -> None:
    assert plan_changes_from(["ac=full", "vpp=2", "compile_model=true"]) == {"ac": "full", "vpp": 2,
                                                                             "compile_model": True}
    with pytest.raises(ConfigError, match="'tp2' is no plan field"):
        plan_changes_from(["tp2=1"])
    with pytest.raises(ConfigError, match="expected FIELD=VALUE"):
        plan_changes_from(["micro_batch"])


def test_bad_input_exits_2_with_one_line_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, needle in ((["--fix", "no.such=1"], "'no.such' is no joint parameter"),
                         (["--fix", "step.fixed_s=9"], "outside the parameter's bounds"),
                         (["--stack", "torchtitan.no_field=1"], "'no_field' is no field"),
                         (["--plan", "micro_batch=0", "--run", "titan-dsv3-b200-bf16"],
                          "run 'titan-dsv3-b200-bf16'"),
                         (["--run", "no-such-run"], "no run id contains it"),
                         (["no/such/file.toml"], "no/such/file.toml")):
        assert main(argv) == 2
        out = capsys.readouterr().out
        assert out.startswith("error: ") and needle in out and "Traceback" not in out
    assert main(["--fix", "release.torchtitan=1", "--run", "titan-dsv3-h100"]) == 0
    assert "speedup titan-dsv3-h100-bf16-deepep over titan-dsv3-h100-bf16" in capsys.readouterr().out


def test_json_output_carries_every_selected_run(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["--run", "titan-dsv3-b200", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in data["runs"]] == ["titan-dsv3-b200-bf16", "titan-dsv3-b200-bf16-deepep",
                                               "titan-dsv3-b200-mxfp8-deepep"]
    assert data["mean_abs_error"] == pytest.approx(sum(abs(r["error"]) for r in data["runs"]) / 3)
    assert all(r["step_s"] == pytest.approx(sum(r["breakdown"].values()), rel=1e-9) for r in data["runs"])


def test_a_grid_row_is_the_prediction_at_its_point() -> None:
    from studies.what_if import grid_points, what_if_grid

    points = grid_points(["host.sync_s=1e-4,8e-4", "nccl.a2a_net_fraction=0.6,0.9"])
    assert [tuple(p.values()) for p in points] == [(1e-4, 0.6), (1e-4, 0.9), (8e-4, 0.6), (8e-4, 0.9)]
    grid = what_if_grid(points, params={"release.torchtitan": 0.4}, select=["titan-dsv3-h100"])
    for point in grid:
        alone = what_if(params={"release.torchtitan": 0.4, **point.values}, select=["titan-dsv3-h100"])
        assert [r.predicted for r in point.rows] == pytest.approx([r.predicted for r in alone], rel=1e-12)
    # the scan moves what its parameters move: a dearer sync slows the DeepEP step, a lower NCCL share the standard one
    deepep = {tuple(p.values.values()): p.rows[1].predicted for p in grid}
    standard = {tuple(p.values.values()): p.rows[0].predicted for p in grid}
    assert deepep[(8e-4, 0.9)] < deepep[(1e-4, 0.9)]
    assert standard[(1e-4, 0.6)] < standard[(1e-4, 0.9)]


def test_the_grid_table_and_json_carry_every_point_run_and_pair(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    argv = ["--run", "titan-dsv3-h100", "--grid", "nccl.a2a_net_fraction=0.6,0.9"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "runs: titan-dsv3-h100-*"  # the words every run id shares, named once
    assert lines[2].startswith("| nccl.a2a_net_fraction | bf16 error | bf16-deepep error | mean abs error |")
    assert "| bf16-deepep over bf16 (measured +67.3%) |" in lines[2]
    assert [line.split(" | ")[0] for line in lines[4:]] == ["| 0.6", "| 0.9"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["grid"]
    assert [p["values"] for p in data] == [{"nccl.a2a_net_fraction": 0.6}, {"nccl.a2a_net_fraction": 0.9}]
    assert all(len(p["runs"]) == 2 and p["speedups"][0]["measured"] == pytest.approx(579 / 346) for p in data)


def test_bad_grids_exit_2_with_one_line_naming_them(capsys: pytest.CaptureFixture[str]) -> None:
    too_many = ",".join(str(0.5 + i / 100) for i in range(9))
    for argv, needle in ((["--grid", "host.sync_s"], "expected NAME=V1,V2"),
                         (["--grid", "host.sync_s=1e-4,,2e-4"], "an empty value"),
                         (["--grid", "host.sync_s=1e-4", "--grid", "host.sync_s=2e-4"], "given twice"),
                         (["--fix", "host.sync_s=1e-4", "--grid", "host.sync_s=2e-4"], "also held by --fix"),
                         (["--grid", "step.fixed_s=1,9"], "--grid step.fixed_s=9: outside the parameter's bounds"),
                         (["--grid", "no.such=1"], "'no.such' is no joint parameter"),
                         (["--grid", f"nccl.a2a_net_fraction={too_many}", "--grid", f"release.torchtitan={too_many}"],
                          "81 points (9 x 9); at most 64"),
                         (["--grid", "host.sync_s=1e-4", "--breakdown"], "--breakdown: not with --grid")):
        assert main(argv) == 2
        out = capsys.readouterr().out
        assert out.startswith("error: ") and needle in out and "Traceback" not in out and out.count("\n") == 1


def test_comm_fields_move_the_runs_whose_transport_reads_them() -> None:
    efa = "studies/data/efa_runs.toml"
    select = ["aws-26.04.01-dsv3-256xb300-mbs4-nooverlap"]
    base = {r.id: r.predicted for r in what_if(efa, select=select)}
    assert {r.id: r.predicted for r in what_if(efa, comm={}, select=select)} == pytest.approx(base, rel=1e-12)
    slower = {r.id: r.predicted for r in what_if(efa, comm={"efa_a2a_fraction": 0.4}, select=select)}
    assert slower["aws-26.04.01-dsv3-256xb300-mbs4-nooverlap-nccl"] < base["aws-26.04.01-dsv3-256xb300-mbs4-nooverlap-nccl"]
    # UCCL-EP's proxy kernels do not read NCCL's EFA share; a dearer proxy hop slows them
    assert slower["aws-26.04.01-dsv3-256xb300-mbs4-nooverlap-uccl-ep"] == pytest.approx(
        base["aws-26.04.01-dsv3-256xb300-mbs4-nooverlap-uccl-ep"], rel=1e-9)
    hop = {r.id: r.predicted for r in what_if(efa, comm={"proxy_normal_s": 2e-3}, select=select)}
    assert hop["aws-26.04.01-dsv3-256xb300-mbs4-nooverlap-uccl-ep"] < base["aws-26.04.01-dsv3-256xb300-mbs4-nooverlap-uccl-ep"]
    # an InfiniBand run does not read the EFA fields
    ib = what_if(comm={"efa_a2a_fraction": 0.4}, select=["titan-dsv3-b200-bf16"])
    assert ib[0].predicted == pytest.approx(what_if(select=["titan-dsv3-b200-bf16"])[0].predicted, rel=1e-12)


def test_a_comm_grid_axis_is_the_comm_option_at_each_value(capsys: pytest.CaptureFixture[str]) -> None:
    from studies.what_if import grid_points, what_if_grid

    efa, select = "studies/data/efa_runs.toml", ["aws-26.04.01-kimi-k2-256xb300-mbs1-nooverlap-uccl-ep"]
    points = grid_points(["comm.proxy_normal_s=4e-4,2e-3"])
    assert points == [{"comm.proxy_normal_s": 4e-4}, {"comm.proxy_normal_s": 2e-3}]
    grid = what_if_grid(points, efa, select=select)
    for point, value in zip(grid, (4e-4, 2e-3)):
        alone = what_if(efa, comm={"proxy_normal_s": value}, select=select)
        assert point.rows[0].predicted == pytest.approx(alone[0].predicted, rel=1e-12)
    assert grid[1].rows[0].predicted < grid[0].rows[0].predicted
    assert main([efa, "--run", select[0], "--grid", "comm.proxy_normal_s=4e-4,2e-3"]) == 0
    assert capsys.readouterr().out.startswith("| comm.proxy_normal_s |")


def test_bad_comm_fields_exit_2_with_one_line_naming_them(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, needle in ((["--comm", "no_such=1"], "'no_such' is no CommCosts field"),
                         (["--comm", "deepep_sms=24"], "is a table of CommCosts"),
                         (["--comm", "efa_a2a_fraction=1.5"], "efa_a2a_fraction takes 0 to 1"),
                         (["--comm", "proxy_normal_s=-1"], "not negative"),
                         (["--comm", "proxy_normal_s=nan"], "not negative"),
                         (["--comm", "proxy_normal_s=fast"], "value 'fast' is not a number"),
                         (["--comm", "proxy_normal_s"], "expected FIELD=VALUE"),
                         (["--grid", "comm.no_such=1,2"], "--grid no_such=1: 'no_such' is no CommCosts field"),
                         (["--comm", "proxy_normal_s=1e-3", "--grid", "comm.proxy_normal_s=2e-3"],
                          "also held by --fix or --comm")):
        assert main(argv) == 2
        out = capsys.readouterr().out
        assert out.startswith("error: ") and needle in out and "Traceback" not in out and out.count("\n") == 1
