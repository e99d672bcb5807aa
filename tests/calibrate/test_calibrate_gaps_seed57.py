"""Gaps the seed-57 mutation sample of sim/ and calibrate/ found (docs/mutation.md, issue 16): one test per
surviving mutant that a real input can observe, each checking the behaviour from its meaning, not the
implementation's formula."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sim.catalog import load_gpu
from sim.errors import ConfigError
from tests.shared_trace import TRACE, needs_trace


def _calibration_text(**tables: Any) -> str:
    return json.dumps({"schema": "moesim.calibration", "version": 2, "name": "c", "gpu": "h800",
                       "provenance": {"method": "test"}, **tables})


def _calibration(**tables: Any):  # type: ignore[no-untyped-def]
    from sim.calibration import parse_calibration

    return parse_calibration(_calibration_text(**tables), "c.json")


def _debug_model():  # type: ignore[no-untyped-def]
    from calibrate.layer_model import model_from_fields
    from calibrate.microbench import _DEBUG

    return model_from_fields(_DEBUG, "debug")


def test_comm_rates_that_are_not_a_table_are_refused_naming_the_file() -> None:
    """(sim.calibration _validate_tables) Every error names the file: a ``comm_rates`` that is a list, not an
    object, is refused with a message that starts with the file it came from."""
    from sim.calibration import parse_calibration

    with pytest.raises(ConfigError) as err:
        parse_calibration(_calibration_text(comm_rates=[1, 2]), "my-cal.json")
    assert str(err.value).startswith("my-cal.json: comm_rates must be an object"), str(err.value)


def test_op_seconds_of_the_file_time_the_memory_kernels_it_names() -> None:
    """(sim.calibration _validate_tables) ``op_seconds`` is read into the calibration's tables under its own
    key: the replay of a traced window times a memory-bound kernel it names by the file's seconds, not by the
    kernel's measured duration, and the table survives a round trip through the file format."""
    from calibrate.compare import simulated_time
    from calibrate.fit import Sample
    from sim.calibration import device_gpu_spec, parse_calibration, to_cost_model

    cal = _calibration(op_seconds={"norm@fwd": 3e-5})
    assert cal.tables["op_seconds"] == {"norm@fwd": 3e-5}
    gpu = device_gpu_spec(cal)
    s = Sample("attn.norm", "fwd", "mem", "bf16", 1e6, 1e6, 0.5, label="norm@fwd")
    assert simulated_time(s, cal, to_cost_model(cal, gpu), gpu) == pytest.approx(3e-5, rel=1e-12)
    again = parse_calibration(json.dumps(cal.to_dict()), "again.json")
    assert again.tables["op_seconds"] == {"norm@fwd": 3e-5}


@pytest.mark.parametrize("pas", ["fwd", "bwd"])
def test_attention_curve_not_the_single_efficiency_times_attention(pas: str) -> None:
    """(calibrate.layer_model layer_time) Where the calibration has an attention efficiency curve for a pass,
    that pass's attention is timed by the curve: the pass's single efficiency (``attn_fwd_eff`` /
    ``attn_bwd_eff``) then makes no difference, and a curve below it makes the step slower."""
    from calibrate.layer_model import layer_time

    model = _debug_model()
    scalar = f"attn_{pas}_eff"
    curve = {pas: {"sizes": [1e6], "values": [0.1]}}
    low = layer_time(_calibration(**{scalar: 0.5}, attn_eff=curve), model, 2048, 1)
    high = layer_time(_calibration(**{scalar: 0.9}, attn_eff=curve), model, 2048, 1)
    assert low.compute_s == pytest.approx(high.compute_s, rel=1e-12)
    without_curve = layer_time(_calibration(**{scalar: 0.5}), model, 2048, 1)
    assert low.compute_s > without_curve.compute_s


def test_layer_time_parts_are_compute_communication_and_op_overhead() -> None:
    """(calibrate.layer_model layer_time) An EP=2 step on a network that takes no time: its communication is
    the blocking host syncs at ``host_sync_s`` each, every op pays ``launch_overhead_s`` once, and the total is
    compute + communication + ops x overhead."""
    from calibrate.layer_model import layer_time

    cal = _calibration(comm_rates={"gloo.all_to_all.w2": {"bytes_per_s": 1e300, "overhead_s": 0.0}},
                       host_sync_s=1e-3, launch_overhead_s=2e-6)
    lt = layer_time(cal, _debug_model(), 128, 2)
    assert isinstance(lt.n_ops, int) and lt.n_ops > 10
    assert lt.host_syncs >= 1
    assert lt.comm_s == pytest.approx(lt.host_syncs * 1e-3, rel=1e-9)
    assert lt.overhead_s == pytest.approx(2e-6, rel=1e-12)
    assert 0 < lt.mem_s <= lt.compute_s < 1e-3
    assert lt.total_s == pytest.approx(lt.compute_s + lt.host_syncs * 1e-3 + lt.n_ops * 2e-6, rel=1e-12)


def test_notify_kernels_give_their_comm_kind_a_fixed_overhead() -> None:
    """(calibrate.fit fit_tables) The notify kernels launched before a communication kind are its fixed cost:
    the fitted comm_rates row of that kind carries their median time as ``overhead_s``, with its residuals."""
    from calibrate.fit import Sample, fit_tables

    comm = [Sample("moe.dispatch", "dispatch(F)", "comm", "bf16", 1e6, 1e6, 1e6 / 40e9, label="deepep.dispatch")
            for _ in range(3)]
    notify = [Sample("moe.dispatch", "dispatch(F)", "notify", "bf16", 1.0, 1.0, t, label="deepep.dispatch")
              for t in (1e-5, 2e-5, 4e-5)]
    tables = fit_tables([*comm, *notify], load_gpu("h800"))
    row = tables["comm_rates"]["deepep.dispatch"]
    assert row["bytes_per_s"] == pytest.approx(40e9, rel=1e-5)
    assert row["overhead_s"] == pytest.approx(2e-5, rel=1e-5)
    assert tables["residuals"]["comm_rates.deepep.dispatch.overhead_s"]["n"] == 3.0


@needs_trace
def test_fit_of_a_job_trace_says_how_it_was_made() -> None:
    """(calibrate.document fit_document) A fit of a real job's trace records in its provenance that it came from
    ``moesim calibrate fit`` by kernel-name rules: the same method the bundled calibration fitted from this
    trace names."""
    from calibrate.document import fit_document
    from sim.calibration import load_calibration

    doc = fit_document([TRACE], name="t")
    bundled = load_calibration("h800-deepseek-trace")
    assert doc["provenance"]["method"] == bundled.provenance["method"]
    assert doc["provenance"]["method"].startswith("moesim calibrate fit (kernel-name rules")
