"""The Chrome trace, event by event: slices in microseconds where the simulation put them.

Pipeline slices are the schedule's actions; layer slices tile their action back to back (backward chunks
in reverse layer order); op slices lie inside their layer; overlapped pairs show inside their FB action.
"""

from __future__ import annotations

import pytest

from sim.catalog import load_cluster, load_model
from sim.predict import Prediction, predict
from sim.specs import ParallelPlan
from sim.trace import chrome_trace_events

US = 1e6


@pytest.fixture(scope="module")
def pp2() -> Prediction:
    return predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=16),
                   ParallelPlan(pp=2, ep=4, dp_shard=8, global_batch=32, seq_len=256))


def _threads(events: list[dict]) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}


def test_pipeline_slices_are_the_schedule_actions_in_microseconds(pp2: Prediction) -> None:
    events = chrome_trace_events(pp2)
    pipe = pp2.trace_data["pipeline"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert procs == {r: f"{pp2.name}: pp rank {r} of 2 (representative GPU: stands for the 8 GPUs of pipeline "
                        f"stage {r}, ranks with the same work simulated once)" for r in range(2)}
    for rank, actions in enumerate(pipe.actions):
        got = [e for e in events if e.get("cat") == "pipeline" and e["pid"] == rank]
        assert all(e["ph"] == "X" for e in got)
        assert [(e["name"], e["args"]) for e in got] == [
            (f"{ph} chunk {st} mb {mb}", {"stage": st, "microbatch": mb}) for ph, st, mb, _s, _e in actions]
        for e, (_ph, _st, _mb, s, end) in zip(got, actions, strict=True):
            assert e["ts"] == pytest.approx(s * US) and e["dur"] == pytest.approx((end - s) * US)
        assert sum(e["dur"] for e in got) == pytest.approx(pipe.busy(rank) * US)


def test_layer_slices_tile_their_action_and_ops_lie_inside(pp2: Prediction) -> None:
    events = chrome_trace_events(pp2, detail_microbatches=1)
    data = pp2.trace_data
    threads = _threads(events)
    for rank, actions in enumerate(data["pipeline"].actions):
        for ph, stage, mb, start, end in actions:
            layers = [e for e in events if e.get("cat") == "layer" and e["pid"] == rank
                      and e["args"]["microbatch"] == mb and start * US - 1e-6 <= e["ts"] < end * US - 1e-9]
            if mb >= 1:
                assert not layers  # only the first detail_microbatches are expanded
                continue
            phase = "fwd" if ph == "F" else "bwd"
            kinds = data["chunks"][stage].layers
            assert [e["name"] for e in layers] == [f"layer {k}" for k in (kinds if ph == "F" else kinds[::-1])]
            assert [e["args"]["layer"] for e in layers] == list(range(len(kinds)))
            assert {e["args"]["phase"] for e in layers} == {phase}
            assert {threads[(rank, e["tid"])] for e in layers} == {"layers (one slice per layer of an expanded chunk)"}
            t = start * US
            for e in layers:
                assert e["ts"] == pytest.approx(t) and e["dur"] > 0
                t += e["dur"]
            assert t == pytest.approx(end * US)  # the chunk is its layers back to back
            for lay in layers:
                ops = [e for e in events if e["pid"] == rank and e.get("cat") in ("compute", "comm")
                       and e["args"].get("microbatch") == mb and e["args"].get("layer") == lay["args"]["layer"]
                       and lay["ts"] - 1e-6 <= e["ts"] <= lay["ts"] + lay["dur"] + 1e-6]
                assert ops, lay
                for op in ops:
                    assert op["dur"] >= 0 and op["ts"] + op["dur"] <= lay["ts"] + lay["dur"] + 1e-6
                    assert threads[(rank, op["tid"])] == f"{op['cat']} stream"


def test_detail_microbatches_bounds_the_expansion(pp2: Prediction) -> None:
    few = chrome_trace_events(pp2, detail_microbatches=0)
    assert not [e for e in few if e.get("cat") in ("layer", "compute", "comm")]
    more = chrome_trace_events(pp2, detail_microbatches=2)
    assert {e["args"]["microbatch"] for e in more if e.get("cat") == "layer"} == {0, 1}


def test_pair_ops_lie_inside_their_fb_action() -> None:
    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    plan = ParallelPlan(pp=2, pp_schedule="dualpipev", ep=8, dp_shard=8, seq_len=4096, global_batch=32,
                        ep_backend="deepep", ac="none")
    pred = predict(model, cluster, plan)
    events = chrome_trace_events(pred, detail_microbatches=8, pid_base=10)
    fb = [e for e in events if e.get("cat") == "pipeline" and e["name"].startswith("FB")]
    assert fb and {e["pid"] for e in events} == {10, 11}
    pair_ops = [e for e in events if "pair" in e.get("args", {})]
    for op in pair_ops:
        host = [a for a in fb if a["pid"] == op["pid"] and a["ts"] - 1e-6 <= op["ts"]
                and op["ts"] + op["dur"] <= a["ts"] + a["dur"] + 1e-6]
        assert host, op
        assert op["args"]["pair"] == f"F mb {host[0]['args']['microbatch']} + B"


def test_trace_file_is_chrome_json_in_milliseconds(pp2: Prediction, tmp_path) -> None:
    import json

    from sim.trace import write_chrome_trace

    path = tmp_path / "t.json"
    write_chrome_trace([pp2, pp2], path, detail_microbatches=1)
    data = json.loads(path.read_text())
    assert data["displayTimeUnit"] == "ms"
    assert {e["pid"] for e in data["traceEvents"]} == {0, 1, 100, 101}  # one process group per prediction
    assert data["traceEvents"] == chrome_trace_events(pp2, detail_microbatches=1) + chrome_trace_events(
        pp2, detail_microbatches=1, pid_base=100)


def _dsv3_h800_dualpipe() -> Prediction:
    """DeepSeek's own plan (README): 2048 H800, DualPipe PP16, EP64, the deepseek stack and its calibration."""
    from sim.calibration import STACK_CALIBRATIONS, load_calibration, to_cost_model
    from sim.catalog import default_cluster
    from sim.loaders import derive_plan_fields, plan_from_mapping
    from sim.stacks import load_stack

    cluster = load_cluster(default_cluster("h800"), n_gpus=2048, gpu="h800")
    plan = plan_from_mapping(derive_plan_fields(dict(pp=16, pp_schedule="dualpipe", ep=64, tp=1, seq_len=4096,
                                                     global_batch=15360, precision="fp8-blockwise",
                                                     ep_backend="deepep", ac="selective"), 2048), "plan")
    costs = to_cost_model(load_calibration(STACK_CALIBRATIONS["deepseek"]), cluster.gpu)
    return predict(load_model("deepseek-v3-671b"), cluster, plan, costs, stack=load_stack("deepseek"))


def test_dualpipe_trace_shows_the_overlap_the_prediction_hides(tmp_path) -> None:
    """The default window (first microbatch + two steady pairs) of DeepSeek's 2048-H800 plan: the share of
    communication under compute, measured from the trace JSON alone, is the prediction's within 2 points and
    at least 40%."""
    import json

    from sim.trace import (
        default_window,
        predicted_hidden_share,
        trace_hidden_share,
        write_chrome_trace,
    )

    pred = _dsv3_h800_dualpipe()
    window = default_window(pred)
    assert window[0] == 0 and len(window) == 3
    path = tmp_path / "t.json"
    write_chrome_trace([pred], path)
    shown = trace_hidden_share(json.loads(path.read_text())["traceEvents"])
    hidden = predicted_hidden_share(pred)
    assert abs(shown - hidden) <= 0.02 and shown >= 0.40, (shown, hidden)
    pairs = [e for e in json.loads(path.read_text())["traceEvents"] if "pair" in e.get("args", {})]
    assert pairs  # the steady window is overlapped pairs


def test_trace_share_is_the_predicted_share_for_1f1b_and_for_chosen_microbatches(pp2: Prediction) -> None:
    from sim.trace import default_window, predicted_hidden_share, trace_hidden_share

    n = pp2.trace_data["plan"].n_microbatches
    assert default_window(pp2) == (0, n // 2)
    for window in ((0,), (1, 3), None):
        events = chrome_trace_events(pp2, microbatches=window)
        assert abs(trace_hidden_share(events) - predicted_hidden_share(pp2, window)) <= 0.02, window


def test_trace_microbatches_out_of_range_exit_2(tmp_path) -> None:
    from moesim.predict_cmd import main

    base = ["--model", "debug", "--gpus", "8", "--ep", "4", "--seq-len", "256", "--trace", str(tmp_path / "t.json")]
    assert main([*base, "--trace-microbatches", "10000"]) == 2
    assert not (tmp_path / "t.json").exists()
    with pytest.raises(SystemExit) as err:
        main([*base, "--trace-microbatches", "-1"])
    assert err.value.code == 2
    assert main([*base, "--trace-microbatches", "0,1"]) == 0


@pytest.mark.parametrize("plan, stack", [
    (ParallelPlan(pp=2, pp_schedule="dualpipev", ep=8, dp_shard=8, seq_len=4096, global_batch=64,
                  ep_backend="deepep"), "torchtitan"),
    (ParallelPlan(ep=8, dp_shard=16, seq_len=4096, global_batch=128, ep_overlap=True), "megatron"),
])
def test_compressed_pairs_are_replayed_so_the_trace_shows_the_hidden_share(plan: ParallelPlan, stack: str) -> None:
    """The 16B model's chunks hold runs of identical layers, simulated compressed and extended: the trace
    replays the repeated periods, so its share under compute is the prediction's (it was 0% / 5 points off).
    The host floor is off here (``host.eager_op_s`` = 0): a host-bound pair's span ends with the GPU idle, waiting
    for the host, which the kernel replay does not draw."""
    from sim.joint import shipped_values
    from sim.trace import pair_log, predicted_hidden_share, trace_hidden_share

    params = {**shipped_values(), "host.eager_op_s": 0.0}
    pred = predict(load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16), plan, stack=stack,
                   params=params)
    assert any(r.repeat for r in pred.trace_data["pairs"].values())
    res = next(r for r in pred.trace_data["pairs"].values() if r.repeat)
    assert max(e for *_x, e in pair_log(res)) == pytest.approx(res.time_s, rel=0.02)
    shown, hidden = trace_hidden_share(chrome_trace_events(pred)), predicted_hidden_share(pred)
    assert abs(shown - hidden) <= 0.02 and shown > 0.3, (shown, hidden)
