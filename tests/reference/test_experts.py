"""Grouped-GEMM experts against a per-expert loop, the permute layout, and MXFP8 error bounds."""

from __future__ import annotations

import pytest
import torch

from reference.errors import ConfigError
from reference.experts import (
    GroupedExperts,
    check_mxfp8_shapes,
    loop_experts,
    make_gemm,
)
from reference.permute import group_layout, permute_rows, unpermute_rows

# Measured relative Frobenius error of emulated MXFP8 (e4m3 values, e8m0 scale per 32, RCEIL) against
# fp32, one grouped GEMM with N(0,1) activations and N(0, 0.02^2) weights, seeds 0-4:
# forward 0.0373-0.0380, dgrad 0.0374-0.0379, wgrad 0.0373-0.0377 (theory: two e4m3 roundings,
# ~sqrt(2) * 2^-4 / sqrt(3) = 0.041). Pinned on both sides: a lower bound proves quantisation happened.
MXFP8_REL_ERR_LOW, MXFP8_REL_ERR_HIGH = 0.030, 0.045


def _grouped_input(n_rows: int, n_groups: int, dim: int, alignment: int, seed: int, empty: int | None = None):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, n_groups, (n_rows,), generator=gen)
    if empty is not None:
        ids[ids == empty] = (empty + 1) % n_groups
    layout = group_layout(ids, n_groups, alignment)
    x = permute_rows(torch.randn(n_rows, dim, generator=gen), layout)
    return layout, x, gen


def test_layout_roundtrip_and_padding() -> None:
    ids = torch.tensor([2, 0, 2, 1, 0, 2])
    layout = group_layout(ids, 4, alignment=4)
    assert layout.sizes_G.tolist() == [2, 1, 3, 0]
    assert layout.offs_G.tolist() == [4, 8, 12, 12]
    x = torch.arange(6.0).unsqueeze(1)
    grouped = permute_rows(x, layout)
    assert grouped[:, 0].tolist() == [1, 4, 0, 0, 3, 0, 0, 0, 0, 2, 5, 0]
    assert torch.equal(unpermute_rows(grouped, layout), x)


@pytest.mark.parametrize("alignment", [1, 8, 32])
def test_grouped_experts_match_loop_fp32(alignment: int) -> None:
    E, D, F = 4, 64, 32
    layout, x, gen = _grouped_input(120, E, D, alignment, seed=alignment, empty=3)
    experts = GroupedExperts(D, F, n_experts=E, n_local=E, first_expert=0)
    experts.init_weights(gen, std=0.1)
    gemm = make_gemm("fp32")
    xg = x.clone().requires_grad_(True)
    out = experts(xg, layout.offs_G, gemm)
    grad = torch.randn(out.shape, generator=gen)
    out.backward(grad)

    xl = x.clone().requires_grad_(True)
    w13 = experts.w13_eXD.detach().clone().requires_grad_(True)
    w2 = experts.w2_eDF.detach().clone().requires_grad_(True)
    sizes = torch.diff(layout.offs_G, prepend=torch.zeros(1, dtype=torch.int32)).tolist()
    ref = loop_experts(xl, sizes, w13, w2)
    ref.backward(grad)

    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xg.grad, xl.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(experts.w13_eXD.grad, w13.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(experts.w2_eDF.grad, w2.grad, rtol=1e-5, atol=1e-6)
    pad_mask = torch.ones(out.shape[0], dtype=torch.bool)
    pad_mask[layout.pos_N] = False
    assert out[pad_mask].abs().sum() == 0


def test_expert_slice_is_the_full_draw() -> None:
    full = GroupedExperts(32, 32, n_experts=8, n_local=8, first_expert=0)
    part = GroupedExperts(32, 32, n_experts=8, n_local=2, first_expert=4)
    full.init_weights(torch.Generator().manual_seed(3))
    part.init_weights(torch.Generator().manual_seed(3))
    assert torch.equal(part.w13_eXD, full.w13_eXD[4:6])
    assert torch.equal(part.w2_eDF, full.w2_eDF[4:6])


def test_bf16_grouped_gemm_close_to_fp32() -> None:
    layout, x, gen = _grouped_input(64, 2, 32, 8, seed=1)
    w = torch.randn(2, 32, 32, generator=gen) * 0.1
    out = make_gemm("bf16")(x, w, layout.offs_G)
    ref = make_gemm("fp32")(x, w, layout.offs_G)
    assert float((out - ref).norm() / ref.norm()) < 1e-2


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("seed", [0, 1])
def test_emulated_mxfp8_relative_error(seed: int) -> None:
    mx = make_gemm("mxfp8")
    assert mx.kernel == "torchao-mxfp8-emulated" and mx.emulated and mx.alignment == 32
    E, D, F = 4, 256, 128
    layout, x, gen = _grouped_input(200, E, D, 32, seed=seed)
    w = torch.randn(E, F, D, generator=gen) * 0.02
    real = torch.zeros(x.shape[0], 1)
    real[layout.pos_N] = 1.0
    grad = torch.randn(x.shape[0], F, generator=gen) * real
    results = {}
    for name, gemm in (("fp32", make_gemm("fp32")), ("mxfp8", mx)):
        xx, ww = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        out = gemm(xx, ww, layout.offs_G)
        out.backward(grad)
        results[name] = (out.detach(), xx.grad, ww.grad)
    for what, got, want in zip(("forward", "dgrad", "wgrad"), results["mxfp8"], results["fp32"]):
        err = _rel(got, want)
        assert MXFP8_REL_ERR_LOW < err < MXFP8_REL_ERR_HIGH, f"{what}: relative error {err:.4f}"


def test_mxfp8_rejects_dims_not_multiple_of_32() -> None:
    with pytest.raises(ConfigError) as info:
        check_mxfp8_shapes(**{"dim (D)": 250, "moe_inter_dim (F)": 128, "x": 40})
    message = str(info.value)
    assert "dim (D) (250)" in message and "x (40)" in message and "128" not in message


def test_unknown_precision_and_real_kernels_without_sm100() -> None:
    from reference.errors import BackendUnavailableError

    with pytest.raises(ConfigError, match="precision must be one of"):
        make_gemm("fp16")
    with pytest.raises(BackendUnavailableError, match="SM100"):
        make_gemm("mxfp8", "cpu", mxfp8_kernels="real")
