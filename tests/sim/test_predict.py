"""End-to-end: the seed scenario, the CLI contract, bad plans, traces, calibration files."""

import json
import subprocess
import sys

import pytest

from moesim.predict_cmd import main
from sim.catalog import load_cluster, load_gpu, load_model
from sim.costs import CostModel, default_costs
from sim.errors import ConfigError, PlanError
from sim.ops import ALL_OPS
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.trace import chrome_trace_events


@pytest.fixture(scope="module")
def seed_preds():
    import argparse

    from moesim.predict_cmd import _run, add_predict_arguments

    parser = argparse.ArgumentParser()
    add_predict_arguments(parser)
    preds, _ = _run(parser.parse_args([]))
    return preds


def test_seed_scenario_within_published_bounds(seed_preds):
    base, deepep, mx, mx_nccl = seed_preds
    assert base.tokens_per_s_per_gpu == pytest.approx(651, rel=0.01)  # the fitted baseline
    assert deepep.tokens_per_s_per_gpu == pytest.approx(859, rel=0.10)
    assert mx.tokens_per_s_per_gpu == pytest.approx(918, rel=0.10)
    assert base.tokens_per_s_per_gpu < mx_nccl.tokens_per_s_per_gpu < deepep.tokens_per_s_per_gpu
    assert all(p.fits_in_memory for p in seed_preds)


# KNOWN GAP (issue 7 item 3, the engine helper's): TorchTitan's DeepEP path dispatches tokens in place
# (torchtitan/distributed/deepep/deepep.py: no sender-side permute / unpermute), so the DeepEP variants
# lost ~7 ms of copies per step and overshoot the measured speedups (+39.6% vs +32%, +45.3% vs +41%
# on branch stacks). Strict: when the overlap engine's sourced mechanisms close the gap, this passes
# and the marker must go.
@pytest.mark.xfail(strict=True, reason="DeepEP speedups overshoot once the in-place data path is modelled")
def test_seed_speedups_within_five_points(seed_preds):
    base, deepep, mx, _ = seed_preds
    assert abs(deepep.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu - 1.32) < 0.05
    assert abs(mx.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu - 1.41) < 0.05


def test_breakdown_sums_to_step(seed_preds):
    for p in seed_preds:
        assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=0.02)


def test_json_contract(capsys):
    assert main(["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["predictions"]) == 4
    for item in data["predictions"]:
        for key in ("name", "tokens_per_s_per_gpu", "step_time_s", "tflops_per_gpu", "mfu", "peak_memory_bytes",
                    "fits_in_memory", "breakdown"):
            assert key in item


def test_single_plan_derives_data_parallel(capsys):
    assert main(["--model", "deepseek-v3-16b", "--gpu", "b200", "--gpus", "16", "--ep", "8", "--json"]) == 0
    item = json.loads(capsys.readouterr().out)["predictions"][0]
    assert item["plan"]["dp_shard"] == 16 and item["plan"]["ep"] == 8


@pytest.mark.parametrize("argv,needle", [
    (["--model", "deepseek-v3-671b", "--gpus", "256", "--tp", "2", "--ep", "48"], "ep"),
    (["--model", "deepseek-v3-16b", "--gpus", "16", "--pp", "4", "--global-batch", "8"], "microbatches"),
    (["--model", "deepseek-v3-16b", "--gpus", "16", "--gpu", "h100", "--precision", "mxfp8"], "SM100"),
    (["--scenario", "no-such-scenario"], "unknown scenario"),
    (["--model", "nope", "--gpus", "8"], "unknown model"),
])
def test_bad_plans_exit_2_with_one_message(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and err.count("\n") == 1


def test_deepep_needs_capable_gpu():
    import dataclasses

    cluster = load_cluster("hgx-b200", n_gpus=8)
    cluster = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu, deepep=False))
    with pytest.raises(PlanError, match="DeepEP"):
        predict(load_model("debug"), cluster, ParallelPlan(ep=4, dp_shard=8, ep_backend="deepep", global_batch=8))


def test_user_scenario_file(tmp_path, capsys):
    f = tmp_path / "mine.toml"
    f.write_text('[scenario]\nmodel = "debug"\ncluster = "hgx-h100"\ngpus = 8\n[base]\nep = 4\nglobal_batch = 16\n'
                 '[[variant]]\nname = "a"\n[[variant]]\nname = "b"\nplan = { ep_backend = "deepep" }\n')
    assert main(["--scenario", str(f), "--json"]) == 0
    names = [p["name"] for p in json.loads(capsys.readouterr().out)["predictions"]]
    assert names == ["a", "b"]
    f.write_text('[scenario]\nmodel = "debug"\ngpus = 8\nbogus = 1\n')
    assert main(["--scenario", str(f)]) == 2


def test_trace_uses_shared_vocabulary(tmp_path):
    p = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=16),
                ParallelPlan(pp=2, ep=4, dp_shard=8, global_batch=32, seq_len=256))
    events = chrome_trace_events(p)
    op_names = {e["name"] for e in events if e.get("cat") in ("compute", "comm")}
    assert op_names and op_names <= set(ALL_OPS)
    assert main(["--model", "debug", "--gpus", "8", "--ep", "4", "--trace", str(tmp_path / "t.json")]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


def test_calibration_roundtrip_and_version(tmp_path):
    costs = default_costs(load_gpu("b200"))
    assert CostModel.from_json(costs.to_json()) == costs
    bad = json.loads(costs.to_json())
    bad["version"] = 99
    with pytest.raises(ConfigError, match="version"):
        CostModel.from_dict(bad)
    f = tmp_path / "calibration.json"
    f.write_text(costs.to_json())
    assert main(["--model", "debug", "--gpus", "8", "--ep", "4", "--calibration", str(f)]) == 0


def test_import_sim_predict_keeps_torch_out():
    code = "import sys, sim, sim.predict, moesim.predict_cmd, sim.trace; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_skewed_routing_is_slower_and_deterministic():
    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    plans = [ParallelPlan(ep=8, dp_shard=16, global_batch=64, micro_batch=4, seq_len=8192, routing=r, routing_seed=3)
             for r in ("balanced", "zipf:1.0")]
    bal, skew = (predict(model, cluster, p) for p in plans)
    assert skew.step_time_s > bal.step_time_s
    assert predict(model, cluster, plans[1]).step_time_s == skew.step_time_s
