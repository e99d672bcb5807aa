"""A cost model survives its JSON file field for field, and the file's format is what docs/calibration.md says."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sim.catalog import load_gpu
from sim.costs import CALIBRATION_VERSION, CostModel, Curve, default_costs
from sim.errors import ConfigError


def _changed() -> CostModel:
    base = default_costs(load_gpu("h100"))
    return dataclasses.replace(
        base, gpu="h100-test", attn_fwd_eff=0.31, attn_bwd_eff=0.27, mem_bw_eff=0.66, quantize_bw_eff=0.44,
        rearrange_s_per_elem={"bf16": 1.5e-12}, comm={"ib_fraction": 0.8},
        accumulate_bw_share={"atomic": 0.02, "sorted": 0.09, "batched": 0.2},
        sources={"attn_fwd_eff": "a test"}, provenance="tests/sim/test_costs_file.py",
        gemm_eff={"bf16": Curve((1e9, 1e12), (0.2, 0.7))}, grouped_gemm_eff={"bf16": Curve((128.0,), (0.5,))})


def test_every_field_round_trips() -> None:
    costs = _changed()
    again = CostModel.from_json(costs.to_json())
    assert again == costs
    for f in dataclasses.fields(CostModel):
        assert getattr(again, f.name) == getattr(costs, f.name), f.name


def test_file_keys_are_the_documented_ones() -> None:
    data = json.loads(_changed().to_json())
    assert set(data) == {"version", "provenance", "gpu", "gemm_eff", "grouped_gemm_eff", "attn_fwd_eff",
                         "attn_bwd_eff", "attn_fp8_fwd_eff", "attn_fp8_bwd_eff", "softmax_eff", "attn_window_row_s",
                         "attn_fp8_window_row_s", "mem_bw_eff",
                         "quantize_bw_eff", "accumulate_bw_share", "rearrange_s_per_elem", "comm", "sources"}
    assert data["version"] == CALIBRATION_VERSION
    assert data["gemm_eff"]["bf16"] == {"sizes": [1e9, 1e12], "values": [0.2, 0.7]}


def test_missing_field_and_legacy_stack_are_named() -> None:
    data = json.loads(_changed().to_json())
    del data["attn_fwd_eff"]
    with pytest.raises(ConfigError, match="attn_fwd_eff"):
        CostModel.from_dict(data)
    with pytest.raises(ConfigError, match="no longer part of a calibration"):
        CostModel.from_dict({**json.loads(_changed().to_json()), "stack": {"compute_scale": 0.5}})
    with pytest.raises(ConfigError, match="expected a JSON object"):
        CostModel.from_dict([])  # type: ignore[arg-type]


def test_optional_fields_default_when_absent() -> None:
    data = json.loads(_changed().to_json())
    for key in ("comm", "sources", "provenance"):
        del data[key]
    costs = CostModel.from_dict(data)
    assert (costs.comm, costs.sources, costs.provenance) == ({}, {}, "")


def test_a_former_nccl_sms_key_becomes_the_one_nccl_sm_knob() -> None:
    """One knob for the SMs NCCL holds (CommCosts.nccl_channels, issue 27 item 5): a file of the former layout
    with a non-zero nccl_sms sets it; its former default 0 leaves NCCL's own; a comm override wins."""
    data = json.loads(_changed().to_json())
    assert CostModel.from_dict({**data, "nccl_sms": 24}).comm == {"ib_fraction": 0.8, "nccl_channels": 24.0}
    assert CostModel.from_dict({**data, "nccl_sms": 0}).comm == {"ib_fraction": 0.8}
    both = {**data, "nccl_sms": 24, "comm": {"nccl_channels": 8}}
    assert CostModel.from_dict(both).comm == {"nccl_channels": 8.0}


def test_bad_rates_name_the_field() -> None:
    base = default_costs(load_gpu("h100"))
    for name in ("attn_fwd_eff", "attn_bwd_eff", "mem_bw_eff", "quantize_bw_eff"):
        with pytest.raises(ConfigError, match=name):
            dataclasses.replace(base, **{name: 0.0})


def test_default_costs_source_every_table() -> None:
    costs = default_costs(load_gpu("b200"))
    assert {"gemm_eff.bf16", "gemm_eff.fp8", "gemm_eff.mxfp8", "grouped_gemm_eff.bf16", "grouped_gemm_eff.mxfp8",
            "grouped_gemm_eff.mxfp8_wgrad", "attn_eff", "mem_bw_eff", "quantize_bw_eff",
            "rearrange_s_per_elem", "accumulate_bw_share"} <= set(costs.sources)
    assert all(costs.sources.values())


def test_attention_fields_round_trip_default_and_refuse_bad_values() -> None:
    """The attention fields added with cuDNN's measured rates: they survive a round trip, older files without them
    read as before (no FP8 rate of its own, the full exponential rate, no window floor), and bad values are named."""
    costs = _changed()
    assert CostModel.from_dict(json.loads(costs.to_json())) == costs
    data = json.loads(costs.to_json())
    for key in ("attn_fp8_fwd_eff", "attn_fp8_bwd_eff", "softmax_eff", "attn_window_row_s", "attn_fp8_window_row_s"):
        del data[key]
    old = CostModel.from_dict(data)
    assert (old.attn_fp8_fwd_eff, old.attn_fp8_bwd_eff, old.softmax_eff, old.attn_window_row_s,
            old.attn_fp8_window_row_s) == (0.0, 0.0, 1.0, (0.0, 0.0), (0.0, 0.0))
    for key, value in (("attn_window_row_s", [1e-9]), ("attn_window_row_s", [-1.0, 0.0]), ("softmax_eff", 0.0),
                       ("attn_fp8_fwd_eff", 2.0), ("attn_fp8_window_row_s", [0.0, 1.0])):
        with pytest.raises(ConfigError, match=key):
            CostModel.from_dict({**json.loads(costs.to_json()), key: value})


def test_index_sum_rates_round_trip_default_and_refuse_bad_values() -> None:
    """The index kernels' rates (sim.costs.ACCUMULATE_BW_SHARE): a file without them reads the sourced ones, and a
    missing layout or a rate out of range is named."""
    from sim.costs import ACCUMULATE_BW_SHARE

    data = json.loads(_changed().to_json())
    assert CostModel.from_dict(data).accumulate_bw_share == {"atomic": 0.02, "sorted": 0.09, "batched": 0.2}
    del data["accumulate_bw_share"]
    assert CostModel.from_dict(data).accumulate_bw_share == ACCUMULATE_BW_SHARE
    for value in ({"atomic": 0.02, "sorted": 0.05}, {"atomic": 0.0, "sorted": 0.05, "batched": 0.1},
                  {"atomic": 0.02, "sorted": 2.0, "batched": 0.1}):
        with pytest.raises(ConfigError, match="accumulate_bw_share"):
            CostModel.from_dict({**data, "accumulate_bw_share": value})
