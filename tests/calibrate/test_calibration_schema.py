"""The calibration file: strict validation (field and value named), loading into a CostModel."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from sim.calibration import (
    BUNDLED,
    calibration_stack,
    load_calibration,
    parse_calibration,
    to_cost_model,
)
from sim.errors import ConfigError


def doc(**extra: Any) -> dict[str, Any]:
    return {"schema": "moesim.calibration", "version": 2, "name": "t", "gpu": "h800",
            "provenance": {"method": "test", "sources": ["x"]}, **extra}


def parse(d: Any) -> Any:
    return parse_calibration(json.dumps(d) if not isinstance(d, str) else d, "cal.json")


def test_a_minimal_file_loads_and_overrides_defaults() -> None:
    cal = parse(doc(gemm_eff={"fp8": {"sizes": [1e10, 1e12], "values": [0.4, 0.6]}}, attn_fwd_eff=0.55,
                    launch_overhead_s=3e-6, comm={"deepep_rdma_fraction": 0.5}))
    costs = to_cost_model(cal)
    assert costs.gemm_eff["fp8"](1e12) == pytest.approx(0.6)
    assert costs.attn_fwd_eff == 0.55 and calibration_stack(cal).kernel_overhead_s == 3e-6
    assert calibration_stack(cal).eff("sm90", "grouped_gemm") == 1.0 and costs.comm == {"deepep_rdma_fraction": 0.5}
    assert "bf16" in costs.gemm_eff  # defaults kept where the file is silent


@pytest.mark.parametrize("bad, needle", [
    (doc(version=3), "version 3 is not supported"),
    ({"version": 1, "gpu": "b200"}, "version 1"),
    (doc(schema="other"), "schema 'other'"),
    (doc(extra=1), "unknown key 'extra'"),
    (doc(name=["a"]), "name must be a non-empty string"),
    (doc(attn_fwd_eff="0.5"), "attn_fwd_eff must be a number, got '0.5'"),
    (doc(attn_fwd_eff=True), "attn_fwd_eff must be a number"),
    (doc(attn_fwd_eff=0), "attn_fwd_eff must be positive"),
    (doc(gemm_eff={"bf16": {"sizes": [0, 1], "values": [0.1, 0.2]}}), "gemm_eff.bf16.sizes[0] must be positive, got 0"),
    (doc(gemm_eff={"bf16": {"sizes": [-5], "values": [0.1]}}), "must be positive, got -5"),
    (doc(gemm_eff={"bf16": {"sizes": [2, 1], "values": [0.1, 0.2]}}), "sizes must increase"),
    (doc(gemm_eff={"bf16": {"sizes": [1], "values": [0.1, 0.2]}}), "differ in length"),
    (doc(gemm_eff={"bf16": {"sizes": [], "values": []}}), "non-empty list"),
    (doc(gemm_eff={"bf16": {"sizes": [1], "values": [0.1], "knots": 3}}), "unknown key 'knots'"),
    (doc(comm={"not_a_field": 1}), "comm.not_a_field is not a CommCosts field"),
    (doc(provenance={"who": "me"}), "provenance.who"),
    (doc(provenance="me"), "provenance must be an object"),
    (doc(stack_efficiency={"sm90": {"gemm.sideways": 0.5}}), "not an op class"),
    (doc(kernels={"fp8": "maybe"}), "kernels.fp8 must be one of"),
    ("{", "malformed JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"version": NaN}', "malformed JSON"),
    ('{"version": NaN}', "NaN is not a number JSON allows"),
    (doc(gemm_eff={"bf16": {"sizes": [], "values": [0.1]}}), "gemm_eff.bf16.sizes must be a non-empty list, got []"),
    (doc(grouped_gemm_eff={"bf16": {"sizes": [2, 1], "values": [0.1, 0.2]}}), "grouped_gemm_eff.bf16.sizes must increase"),
    (doc(kernels=["fp8"]), "cal.json: kernels must be"),
    (doc(device_spec=[1]), "cal.json: device_spec must be"),
    (doc(device_spec={"bf16_flops": -1.0}), "cal.json: device_spec.bf16_flops must be positive"),
    ('{"a": ' * 100_000 + "1" + "}" * 100_000, "nested"),
    (json.dumps(doc(sources={"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": 1}}}}}}}})), "nested deeper"),
])
def test_malformed_files_name_the_field_and_value(bad: Any, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(bad)
    assert needle in str(err.value)
    assert str(err.value).startswith("cal.json")


def test_non_finite_numbers_are_rejected_even_when_python_writes_them() -> None:
    text = json.dumps(doc(attn_fwd_eff=math.inf))  # json.dumps writes Infinity
    with pytest.raises(ConfigError, match="malformed JSON"):
        parse(text)


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_calibrations_load_with_provenance_and_sources(name: str) -> None:
    cal = load_calibration(name)
    assert cal.provenance.get("sources") and cal.provenance.get("method")
    assert cal.tables.get("sources"), "every bundled number carries its source"
    to_cost_model(cal)


def test_sources_travel_into_the_cost_model() -> None:
    cal = parse(doc(attn_fwd_eff=0.55, sources={"attn_fwd_eff": "a test"}))
    costs = to_cost_model(cal)
    assert costs.sources.get("attn_fwd_eff") == "a test"
    assert costs.provenance == "calibration t: test"


def test_residual_tables_keep_their_names_and_launch_gap_defaults() -> None:
    cal = parse(doc(residuals={"gemm_eff.bf16": {"n": 4, "p10_rel": -0.1, "p90_rel": 0.1}}))
    assert set(cal.tables["residuals"]) == {"gemm_eff.bf16"}
    from sim.stacks import StackProfile

    stack = calibration_stack(parse(doc()))
    assert stack.kernel_overhead_s == StackProfile().kernel_overhead_s
    assert stack.host_sync_s == StackProfile().host_sync_s


def test_version_one_messages_tell_a_bare_cost_model_from_an_old_calibration() -> None:
    with pytest.raises(ConfigError, match="a bare CostModel"):
        parse({"version": 1, "gpu": "b200"})
    with pytest.raises(ConfigError, match="version 1 is not supported"):
        parse(doc(version=1))


def test_summary_names_what_a_prediction_reports() -> None:
    cal = parse(doc(provenance={"method": "test", "sources": ["x"], "date": "2026-12-01", "git": "abc",
                                "device": "NVIDIA H800"}))
    assert cal.summary() == {"name": "t", "path": cal.path, "gpu": "h800", "device": "NVIDIA H800",
                             "method": "test", "date": "2026-12-01", "git": "abc", "sources": ["x"]}


@pytest.mark.parametrize("bad, needle", [
    (doc(stack_efficiency={"sm90": {"gemm.fwd": 1.6}}), "stack_efficiency.sm90"),
    (doc(op_seconds={"moe.permute": "x"}), "op_seconds"),
    (doc(op_seconds={"moe.permute": -1.0}), "op_seconds"),
])
def test_more_malformed_tables_name_their_field(bad: Any, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse(bad)


def test_device_spec_takes_every_gpuspec_field() -> None:
    """Every GPUSpec field is allowed in device_spec, with its own type; the GPUSpec built from it has them."""
    import dataclasses

    from sim.calibration import device_gpu_spec
    from sim.specs import GPUSpec

    spec = {"name": "x1", "bf16_flops": 1e15, "fp8_flops": 2e15, "hbm_bytes": 1e11, "hbm_bw_bytes_per_s": 4e12,
            "num_sms": 100, "nvlink_bw_bytes_per_s": 4e11, "arch": "sm100", "fp4_flops": 4e15, "mxfp8": True,
            "deepep": False, "exp_per_s": 0.0, "source": "a test"}
    assert set(spec) == {f.name for f in dataclasses.fields(GPUSpec)}  # fails when GPUSpec grows a field
    gpu = device_gpu_spec(parse(doc(device_spec=spec)))
    assert dataclasses.asdict(gpu) == spec


@pytest.mark.parametrize("bad, needle", [
    ({"mxfp8": 1}, "device_spec.mxfp8 must be a boolean"),
    ({"deepep": "yes"}, "device_spec.deepep must be a boolean"),
    ({"fp4_flops": -1.0}, "device_spec.fp4_flops"),
    ({"num_sms": 2.5}, "device_spec.num_sms must be a whole number"),
    ({"tflops": 1.0}, "device_spec.tflops is not a GPU field"),
])
def test_device_spec_field_types(bad: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse(doc(device_spec={"bf16_flops": 1e15, "fp8_flops": 2e15, "hbm_bw_bytes_per_s": 4e12, **bad}))
