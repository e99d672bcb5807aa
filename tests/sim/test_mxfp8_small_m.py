"""Below TorchAO's smallest published M (16384 rows at G = 8) the MXFP8 grouped GEMM does not gain on BF16:
the published fwd+bwd speedup falls with M over the whole chart (1.39 / 1.25 / 1.20 / 0.99x), so the model
holds it at 0.99x there instead of letting the BF16 curve roll off alone (published.md s4)."""

from __future__ import annotations

import pytest

import sim.costs as costs
from sim.catalog import load_gpu


def _implied_speedup(m: float) -> float:
    """fwd+bwd BF16 time over MXFP8 time (quantize + rearrange + fwd + dgrad + wgrad) at ``m`` rows, DeepSeek-V3
    expert shapes, from the B200 default curves."""
    c = costs.default_costs(load_gpu("b200"))
    flops = 2 * m * costs._REF_N * costs._REF_K
    bf16 = 3 * flops / (costs._B200_BF16 * c.grouped_gemm_eff["bf16"](m))
    mx = c.grouped_gemm_eff["mxfp8"](m)
    gemms = 2 * flops / (costs._B200_FP8 * mx) + flops / (costs._B200_FP8 * c.grouped_gemm_eff["mxfp8_wgrad"](m))
    return bf16 / (gemms + costs._mxfp8_pass_overhead(m, costs._QUANT_BW_EFF, costs._B200_HBM))


@pytest.mark.parametrize(("m", "published"), [(16384, 0.99), (32768, 1.20), (65536, 1.25), (131072, 1.39)])
def test_the_published_speedups_are_reproduced(m: int, published: float) -> None:
    assert _implied_speedup(m) == pytest.approx(published, rel=1e-6)


@pytest.mark.parametrize("m", [4096, 8192, 12000])
def test_below_the_chart_mxfp8_gains_nothing_more_on_bf16(m: int) -> None:
    # a flat MXFP8 curve under a rolling-off BF16 one gives 1.054x at 8192; between the curves' points
    # their log-linear interpolation leaves under 1% either way
    assert 0.98 <= _implied_speedup(m) <= 1.01


def _joint_curves(stack_name: str) -> dict[str, costs.Curve]:
    """The grouped curves a B200 prediction with ``stack_name`` runs on (the joint calibration applied)."""
    from sim.catalog import load_cluster
    from sim.joint import apply_params, shipped_values
    from sim.specs import ParallelPlan
    from sim.stacks import load_stack

    cluster = load_cluster("hgx-b200", n_gpus=8)
    _, c, _ = apply_params(shipped_values(), cluster, costs.default_costs(cluster.gpu), load_stack(stack_name),
                           ParallelPlan(ep=8, dp_shard=8, precision="mxfp8-grouped"))
    return c.grouped_gemm_eff


@pytest.mark.parametrize(("m", "published"), [(16384, 0.99), (32768, 1.20), (65536, 1.25), (131072, 1.39)])
def test_under_the_joint_roll_off_torchaos_mxfp8_keeps_its_published_speedup_over_bf16(m: int, published: float) -> None:
    """The joint calibration's grouped roll-off moves the BF16 curve; TorchAO's MXFP8 curves follow it so that
    MXFP8's fwd+bwd speedup over BF16 stays the published one at every shape (it used to be flattened to the
    large-shape 1.39x everywhere)."""
    c = _joint_curves("torchtitan")
    flops = 2 * m * costs._REF_N * costs._REF_K
    bf16 = 3 * flops / (costs._B200_BF16 * c["bf16"](m))
    gemms = 2 * flops / (costs._B200_FP8 * c["mxfp8"](m)) + flops / (costs._B200_FP8 * c["mxfp8_wgrad"](m))
    assert bf16 / (gemms + costs._mxfp8_pass_overhead(m, costs._QUANT_BW_EFF, costs._B200_HBM)) == pytest.approx(
        published, rel=1e-6)
    default_bf16 = costs.default_costs(load_gpu("b200")).grouped_gemm_eff["bf16"]
    assert c["bf16"](32768) != pytest.approx(default_bf16(32768), rel=1e-3)  # the joint roll-off, not the default


def test_transformer_engines_mxfp8_keeps_its_own_large_shape_rate() -> None:
    """Megatron's MXFP8 grouped GEMM is Transformer Engine's (cuBLAS, weights quantised once per step), not
    TorchAO's: its curve is the joint roll-off from its own large-shape rate, not derived from TorchAO's speedups."""
    from sim.joint import GROUPED_LARGE_TE

    c = _joint_curves("megatron-26.04")
    assert c["mxfp8"](16384 * 8) == pytest.approx(GROUPED_LARGE_TE["mxfp8"], rel=1e-9)
    assert _joint_curves("torchtitan")["mxfp8"](16384 * 8) != pytest.approx(GROUPED_LARGE_TE["mxfp8"], rel=1e-3)
