"""The joint calibration (issue 27): named parameters applied in one place, fitted jointly, validated by
leave-one-group-out, and stored with their uncertainty and the runs that constrain them."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest

from sim.calibration import load_calibration, to_cost_model
from sim.catalog import load_cluster, load_model
from sim.costs import default_costs
from sim.errors import ConfigError
from sim.joint import (
    BENCHMARKED_CLASSES,
    MEGATRON_LAYER_RATE,
    NVL72_PARTS,
    PARAMS,
    TORCHTITAN_LAYER_RATE,
    apply_params,
    grouped_curve,
    issues_eagerly,
    joint_fit_record,
    launch_mode,
    launch_s,
    prior_values,
    shipped_values,
)
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.stacks import load_stack
from studies.joint_fit import (
    RunCase,
    dataset_digest,
    fit_joint,
    group_of,
    load_cases,
    logo,
)


def test_the_shipped_fit_is_of_the_shipped_dataset() -> None:
    """A dataset change without a refit is caught (python -m studies.joint_fit --write)."""
    assert joint_fit_record().get("dataset_sha256") == dataset_digest()


def test_at_most_twelve_shared_parameters_plus_one_scalar_per_release() -> None:
    shared = [p for p in PARAMS if not p.name.startswith("release.")]
    assert len(shared) <= 12
    assert len({p.name for p in PARAMS}) == len(PARAMS)


def test_every_parameter_is_reported_with_its_mechanism_source_and_constraints() -> None:
    params = joint_fit_record()["params"]
    for p in PARAMS:
        rec = params[p.name]
        assert rec["mechanism"] and rec["source"]
        assert p.lower <= rec["value"] <= p.upper
        if rec["fitted"]:
            assert rec["sigma"] is not None and rec["sigma"] >= 0 and rec["constrained_by"]
        else:  # a parameter the fit may not move keeps its sourced prior
            assert rec["value"] == pytest.approx(p.prior)


def test_release_priors_are_the_layer_benchmarks_not_step_runs() -> None:
    """A release scalar's prior is what a fold without any of that release's runs uses: it comes from the single-layer
    checks run at the calibration's kernel rates (no step run of the dataset), and it follows them."""
    from studies.layer_cells import layer_cell_rows
    from studies.torchtitan_layer import layer_rows

    titan = [r["ratio"] for r in layer_rows()]  # predicted / measured time of TorchTitan's MoE layer alone
    assert TORCHTITAN_LAYER_RATE == pytest.approx(sum(titan) / len(titan), abs=0.02)
    logs = [math.log(r["predicted"][k] / r["measured"][k]) for r in layer_cell_rows() for k in ("forward_ms", "backward_ms")]
    assert MEGATRON_LAYER_RATE == pytest.approx(math.exp(sum(logs) / len(logs)), abs=0.02)
    priors = prior_values()
    assert priors["release.torchtitan"] == TORCHTITAN_LAYER_RATE
    assert priors["release.megatron-26.02"] == priors["release.megatron-26.04"] == MEGATRON_LAYER_RATE
    for p in PARAMS:
        if p.name.startswith("release."):
            assert "one-run fit" not in p.source


def test_release_scalars_are_mirrored_in_the_stack_profiles() -> None:
    """One number per release, the same on every architecture, and the profile file says what is used."""
    values = shipped_values()
    for name, value in values.items():
        if name.startswith("release."):
            stack = load_stack(name.removeprefix("release."))
            for arch in ("sm90", "sm100", "sm103"):
                for op_class in ("attn.fwd", *BENCHMARKED_CLASSES):
                    assert stack.eff(arch, op_class) == pytest.approx(value, abs=5e-5)


def test_apply_params_touches_fitted_releases_only() -> None:
    gpu_cluster = load_cluster("hgx-b200", n_gpus=8)
    plan = ParallelPlan(ep=8, dp_shard=8, global_batch=8, seq_len=1024)
    costs = default_costs(gpu_cluster.gpu)
    values = dict(prior_values(), **{"release.torchtitan": 0.3})
    _, _, stack = apply_params(values, gpu_cluster, costs, load_stack("torchtitan"), plan)
    assert stack.eff("sm100", "attn.fwd") == 0.3
    # the scalar slows every class; the alternative's switch keeps the microbenchmarked library kernels at 1
    assert stack.eff("sm100", "grouped_gemm") == stack.eff("sm90", "quant") == 0.3
    _, _, spared = apply_params(dict(values, **{"release.spares_benchmarked": 1.0}), gpu_cluster, costs,
                                load_stack("torchtitan"), plan)
    assert spared.eff("sm100", "grouped_gemm") == spared.eff("sm90", "quant") == 1.0
    assert spared.eff("sm100", "attn.fwd") == 0.3
    assert stack.kernel_overhead_s == launch_s(launch_mode(stack, plan), values, base=stack.launch,
                                               compiled_s=load_stack("torchtitan").kernel_overhead_s)
    for user in (dataclasses.replace(load_stack("torchtitan"), name="my-stack"),
                 dataclasses.replace(load_stack("torchtitan"), kernel_overhead_s=1e-6)):  # a changed copy
        _, _, same = apply_params(values, gpu_cluster, costs, user, plan)
        assert same == user


def test_chip_rates_apply_to_the_parts_they_name() -> None:
    values = dict(prior_values(), **{"chip.nvl72_rate": 0.9})
    plan = ParallelPlan(ep=8, dp_shard=8, global_batch=8, seq_len=1024)
    for cluster_name, gpu in (("gb200-nvl72", "gb200"), ("hgx-b200", "b200")):
        cluster = load_cluster(cluster_name, n_gpus=8)
        out, _, _ = apply_params(values, cluster, default_costs(cluster.gpu), load_stack("megatron"), plan)
        factor = 0.9 if gpu in NVL72_PARTS else 1.0
        assert out.gpu.bf16_flops == pytest.approx(cluster.gpu.bf16_flops * factor)
        assert out.gpu.hbm_bw_bytes_per_s == cluster.gpu.hbm_bw_bytes_per_s  # the clock, not the memory


def test_grouped_roll_off_follows_rows_per_expert_and_spares_trace_calibrations() -> None:
    curve = grouped_curve(0.5, 1000.0)
    assert curve(16384 * 8) == pytest.approx(0.5)
    assert curve(1024 * 8) == pytest.approx(0.5 * (1024 / 2024) / (16384 / 17384), rel=1e-9)  # a grid point
    assert curve(512 * 8) < curve(2048 * 8) < curve(16384 * 8)
    cluster = load_cluster("hgx-h100", n_gpus=8)
    h800 = to_cost_model(load_calibration("h800-deepseek-trace"), cluster.gpu)
    _, out, _ = apply_params(shipped_values(), cluster, h800, load_stack("deepseek"), ParallelPlan(ep=8, dp_shard=8))
    assert out.grouped_gemm_eff == h800.grouped_gemm_eff


def test_cuda_graphs_cost_less_per_kernel_than_eager() -> None:
    v = prior_values()
    assert launch_s("graphs", v) < launch_s("eager", v)
    # under partial graphs the uncaptured kernels launch as the stack does (the captured ones: OpSpec.graphed)
    assert launch_s("partial", v) == launch_s("eager", v) and launch_s("partial", v, base="compiled",
                                                                       compiled_s=3e-6) == 3e-6
    with pytest.raises(ValueError, match="compiled_s"):
        launch_s("compiled", v)
    stack = load_stack("megatron")
    assert launch_mode(stack, ParallelPlan(cuda_graphs="full")) == "graphs"
    assert launch_mode(stack, ParallelPlan()) == stack.launch


def test_a_model_torch_compile_leaves_out_launches_eagerly() -> None:
    """TorchTitan with only the loss compiled (``compile_model`` false) launches and issues its blocks as an eager
    stack does, and pays the host floor; an eager stack (Megatron) is the same either way."""
    titan, megatron = load_stack("torchtitan"), load_stack("megatron")
    assert launch_mode(titan, ParallelPlan()) == "compiled" and not issues_eagerly(titan, ParallelPlan())
    assert launch_mode(titan, ParallelPlan(compile_model=False)) == "eager"
    assert issues_eagerly(titan, ParallelPlan(compile_model=False))
    assert launch_mode(megatron, ParallelPlan(compile_model=False)) == launch_mode(megatron, ParallelPlan())
    assert launch_mode(titan, ParallelPlan(compile_model=False, cuda_graphs="full")) == "graphs"
    with pytest.raises(ConfigError, match="compile_model"):
        ParallelPlan(compile_model="no")  # type: ignore[arg-type]


def test_predict_takes_explicit_parameters() -> None:
    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    plan = ParallelPlan(ep=8, dp_shard=16, global_batch=32, seq_len=2048, ac="full")
    slow = dict(shipped_values(), **{"release.torchtitan": 0.2})
    a = predict(model, cluster, plan, stack="torchtitan")
    b = predict(model, cluster, plan, stack="torchtitan", params=slow)
    assert b.step_time_s > a.step_time_s
    assert predict(model, cluster, plan, stack="torchtitan", params=shipped_values()).step_time_s == a.step_time_s


@pytest.fixture(scope="module")
def small_cases() -> list[RunCase]:
    """Three quick Megatron 26.04 runs of the shipped dataset on 8 GPUs, in two groups."""
    wanted = ("mcore-26.04-qwen3-30b-8xb200-sameplan", "mcore-26.04.01-qwen3-30b-8xb200",
              "mcore-26.04-qwen3-30b-8xgb200-sameplan")
    cases = {c.run.id: c for c in load_cases()}
    return [cases[w] for w in wanted]


def test_the_fit_recovers_a_planted_release_scalar(small_cases: list[RunCase]) -> None:
    """Measured values made by the simulator at a known scalar: the joint fit finds it again."""
    from studies.joint_fit import predict_cases

    truth = dict(shipped_values(), **{"release.megatron-26.04": 0.55})
    made = predict_cases(small_cases, truth)
    planted = [dataclasses.replace(c, run=dataclasses.replace(c.run, measured_tokens_per_s_per_gpu=float(m)))
               for c, m in zip(small_cases, made, strict=True)]
    # Three runs cannot pin three free parameters (the roll-off trades against the scalar on these shapes): the
    # other shared parameters are held at their shipped values, so the scalar alone is fitted.
    shipped = shipped_values()
    held = {n: shipped[n] for n in ("launch.eager_s", "grouped.half_rows_per_expert_launch", "step.fixed_s")}
    fit = fit_joint(planted, start=shipped, fixed=held, max_nfev=20)
    assert fit.free == ["release.megatron-26.04"]
    assert fit.values["release.megatron-26.04"] == pytest.approx(0.55, rel=0.03)
    assert max(abs(r) for r in fit.residuals.values()) < 0.01


def test_logo_predicts_each_group_without_its_runs(small_cases: list[RunCase]) -> None:
    fit = fit_joint(small_cases, start=shipped_values(), max_nfev=3)
    folds = logo(small_cases, fit)
    assert set(folds) == {group_of(c.run) for c in small_cases}
    for g, fold in folds.items():
        assert all(group_of(c.run) == g for c in small_cases if c.run.id in fold["runs"])
        assert all(math.isfinite(e) for e in fold["errors"])


def test_leave_one_model_out_holds_out_every_run_of_one_model(small_cases: list[RunCase]) -> None:
    by_id = {c.run.id: c for c in load_cases()}
    cases = [*small_cases[:2], by_id["mcore-26.04.01-qwen3-235b-256xb200"]]  # two models
    fit = fit_joint(cases, start=shipped_values(), max_nfev=3)
    folds = logo(cases, fit, by="model")
    assert set(folds) == {"qwen3-30b-a3b", "qwen3-235b-a22b"}
    for model, fold in folds.items():
        assert sorted(fold["runs"]) == sorted(c.run.id for c in cases if c.run.model == model)
        assert all(math.isfinite(e) for e in fold["errors"])


def test_validate_json_reports_logo_and_the_layer_cells() -> None:
    out = subprocess.run([sys.executable, "-m", "moesim", "validate", "--json"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode in (0, 1), out.stderr
    data = json.loads(out.stdout)
    assert 0 < data["logo_mape"] <= data["logo_max"]
    assert 0 < data["lomo_mape"] <= data["lomo_max"]  # leave one model out (the stored folds)
    runs = data["logo"]["runs"]
    assert len(runs) >= 28 and all(r["held_out_fold"] for r in runs)
    cells = data["layer_cells"]
    assert len(cells) == 12 and sum(c["fitted"] for c in cells) <= 2
    for c in cells:
        assert c["kind"] == "moe-layer"
        assert set(c["measured"]) == set(c["predicted"]) == {"forward_ms", "backward_ms"}


def _fake_row(item):  # type: ignore[no-untyped-def]
    """A stand-in ablation row: (the values' count, the row's max_nfev), quick to compute in a worker."""
    return (float(len(item[2])), float(item[4]))


def test_ablation_rows_in_workers_match_the_serial_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--workers`` runs the rows in processes; every row comes back once, with the serial run's result."""
    import studies.joint_fit as jf

    monkeypatch.setattr(jf, "_ablation_row", _fake_row)
    items = [(f"row {i}", "param", {"x": float(i)} if i % 2 else {}, {}, i) for i in range(5)]
    serial = dict(jf._ablation_rows(items, 1))
    parallel = dict(jf._ablation_rows(items, 2))
    assert serial == parallel and set(serial) == {f"row {i}" for i in range(5)}


def test_a_trial_fits_a_sourced_parameter_in_the_fit_and_its_folds(small_cases: list[RunCase]) -> None:
    """``--free``: a parameter the shipped calibration holds at its sourced value is fitted in the trial and in
    every fold that still has a run constraining it; a fold without one falls back to the prior."""
    from sim.joint import PARAM_NAMES, spec
    from studies.joint_fit import predict_cases

    truth = dict(shipped_values(), **{"chip.nvl72_rate": 0.95})
    made = predict_cases(small_cases, truth)
    planted = [dataclasses.replace(c, run=dataclasses.replace(c.run, measured_tokens_per_s_per_gpu=float(m)))
               for c, m in zip(small_cases, made, strict=True)]
    shipped = shipped_values()
    held = {n: shipped[n] for n in PARAM_NAMES if spec(n).fitted}
    fit = fit_joint(planted, start=shipped, fixed=held, max_nfev=20, also_free=["chip.nvl72_rate"])
    assert fit.free == ["chip.nvl72_rate"] and fit.also_free == ["chip.nvl72_rate"]
    assert fit.values["chip.nvl72_rate"] == pytest.approx(0.95, rel=0.01)
    folds = logo(planted, fit, max_nfev=10)
    without_rack = folds["gb200-nvl72 x megatron"]["params"]["chip.nvl72_rate"]
    with_rack = folds["hgx-b200 x megatron"]["params"]["chip.nvl72_rate"]
    assert without_rack == pytest.approx(spec("chip.nvl72_rate").prior)
    assert with_rack == pytest.approx(0.95, rel=0.01)


@pytest.mark.parametrize("argv, says", [
    (["--fix", "nope=1"], "--fix nope=1: 'nope' is no joint parameter or switch"),
    (["--fix", "step.fixed_s"], "expected NAME=VALUE"),
    (["--fix", "step.fixed_s=x"], "value 'x' is not a number"),
    (["--fix", "step.fixed_s=9"], "outside the parameter's bounds [0, 5]"),
    (["--free", "step.fixed_s"], "the shipped calibration fits it already"),
    (["--free", "chip.gb300_clock", "--write"], "drop --write and --ablation"),
    (["--fix", "chip.nvl72_rate=1", "--free", "chip.nvl72_rate"], "also held by --fix"),
    (["--stack", "torchtitan.nope=1"], "'nope' is no field of torchtitan's profile"),
    (["--stack", "nowhere.indexed_accumulate=true"], "'nowhere' is no built-in stack profile"),
    (["--stack", "torchtitan.indexed_accumulate=maybe"], "takes true or false, got 'maybe'"),
    (["--stack", "torchtitan.host_op_s=fast"], "host_op_s takes a number, got 'fast'"),
    (["--stack", "torchtitan"], "expected NAME.FIELD=VALUE"),
    (["--stack", "torchtitan.nvlink_domain_ranks=1.5"], "takes a whole number, got '1.5'"),
    (["--stack", "torchtitan.host_op_s=-1"], "host_op_s must be a number in [0, 0.1], got -1.0"),
    (["--stack", "torchtitan.recompute_modules=mlp"], "recompute_modules is a tuple, not a trial's field"),
    (["--stack", "torchtitan.indexed_accumulate=true", "--ablation"], "drop --write and --ablation"),
    (["--start", "host.sync_s=5e-4", "--write"], "drop --write and --ablation"),
    (["--start", "dp.straggler_cv=0.1"], "dp.straggler_cv is sourced, not fitted"),
    (["--start", "host.sync_s=1"], "outside the parameter's bounds"),
    (["--start", "nope=1"], "--start nope=1: 'nope' is no joint parameter;"),
])
def test_trial_options_are_refused_with_one_line_naming_the_option(argv: list[str], says: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from studies.joint_fit import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err


def test_heldout_errors_agree_with_validate_on_each_file() -> None:
    """The trial's held-out check predicts each held-out file as ``moesim validate FILE`` does."""
    from studies.dataset import MEASURED_RUNS
    from studies.interval_check import HELD_OUT_FILES
    from studies.joint_fit import heldout_errors
    from studies.validate import validate_runs

    rows = heldout_errors(shipped_values())
    assert set(rows) == set(HELD_OUT_FILES)
    for name in ("heldout_recent.toml", "scale_checks.toml"):
        result = validate_runs(MEASURED_RUNS.parent / name)
        n, mape, _, mx = rows[name]
        assert n == len(result.holdout_errors)
        assert mape == pytest.approx(result.mape, rel=1e-6)
        assert mx == pytest.approx(result.max_abs_error, rel=1e-6)


def test_speedup_lines_read_the_in_sample_residuals() -> None:
    """A run with a baseline: its predicted speedup is the measured one times the ratio of the two runs' predicted
    over measured throughputs (the fit's residuals); a baseline outside the cases gives no line."""
    from studies.joint_fit import JointFit, load_cases, speedup_lines

    cases = [c for c in load_cases() if c.run.id.startswith("titan-dsv3-b200")]
    ids = [c.run.id for c in cases]
    fit = JointFit(values={}, free=[], sigma={}, correlation=[], constrained_by={}, run_ids=ids,
                   residuals={"titan-dsv3-b200-bf16": -0.10, "titan-dsv3-b200-bf16-deepep": 0.10,
                              "titan-dsv3-b200-mxfp8-deepep": 0.0})
    lines = speedup_lines(cases, fit)
    assert lines == [
        "speedup titan-dsv3-b200-bf16-deepep over titan-dsv3-b200-bf16: predicted +61.3%, measured +32.0%",
        "speedup titan-dsv3-b200-mxfp8-deepep over titan-dsv3-b200-bf16: predicted +56.7%, measured +41.0%"]
    assert speedup_lines(cases[1:], fit) == []


def test_a_stack_trial_runs_the_fit_under_the_changed_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--stack NAME.FIELD=VALUE``: the fit, its folds and the held-out files see the changed profile, and only
    within the run."""
    import studies.joint_fit as jf
    from sim.stacks import load_stack

    seen: list[tuple[bool, bool]] = []
    monkeypatch.setattr(jf, "_run", lambda args, held, free, start: seen.append(
        (load_stack("torchtitan").indexed_accumulate, load_stack("megatron-26.04").indexed_accumulate)) or 0)
    assert jf.main(["--stack", "torchtitan.indexed_accumulate=false"]) == 0
    assert seen == [(False, False)] and load_stack("torchtitan").indexed_accumulate


def test_a_start_trial_begins_the_fit_there_and_every_other_parameter_at_its_prior(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--start NAME=VALUE``: the least squares begins the named parameter at VALUE, the rest at their priors."""
    import studies.joint_fit as jf
    from sim.joint import prior_values

    starts: list[dict[str, float]] = []
    monkeypatch.setattr(jf, "_run", lambda args, held, free, start: starts.append(dict(start)) or 0)
    assert jf.main(["--start", "host.sync_s=5e-4"]) == 0
    assert starts == [dict(prior_values(), **{"host.sync_s": 5e-4})]
