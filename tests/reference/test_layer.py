"""The decoder layer on one process: MoE against a per-token loop, causality, dense layers, bad config."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from reference.errors import ConfigError
from reference.layer import build_layer, check_layer_config


def test_moe_matches_per_token_loop(debug_spec) -> None:
    layer = build_layer(debug_spec, precision="fp32", seed=1, bias_std=0.01)
    moe = layer.moe
    x = torch.randn(40, debug_spec.dim)
    out = moe(x)
    idx, weight = moe.router(x)
    w13, w2 = moe.experts.w13_eXD, moe.experts.w2_eDF
    for t in range(x.shape[0]):
        want = moe.shared(x[t : t + 1])[0]
        for k in range(debug_spec.top_k):
            e = int(idx[t, k])
            gate, up = (w13[e] @ x[t]).chunk(2)
            want = want + weight[t, k] * (w2[e] @ (F.silu(gate) * up))
        torch.testing.assert_close(out[t], want, rtol=1e-5, atol=1e-6)


def test_layer_is_causal_and_differentiable(debug_spec) -> None:
    layer = build_layer(debug_spec, precision="fp32", seed=0)
    x = torch.randn(2, 12, debug_spec.dim, requires_grad=True)
    out = layer(x)
    changed = x.detach().clone()
    changed[:, 8:] += 1.0
    out2 = layer(changed)
    torch.testing.assert_close(out[:, :8], out2[:, :8])
    out.backward(torch.randn_like(out))
    assert x.grad is not None
    assert all(p.grad is not None for p in layer.parameters())


def test_dense_layer_and_no_q_lora(debug_spec) -> None:
    spec = dataclasses.replace(debug_spec, q_lora_rank=0, score_func="softmax")
    dense = build_layer(spec, layer_id=0, precision="fp32")
    assert dense.mlp is not None and dense.moe is None and hasattr(dense.attn, "wq")
    assert dense(torch.randn(1, 4, spec.dim)).shape == (1, 4, spec.dim)
    moe = build_layer(spec, precision="fp32")
    assert moe.moe is not None and not moe.moe.router.use_bias


def test_same_seed_same_weights(debug_spec) -> None:
    a = build_layer(debug_spec, seed=5)
    b = build_layer(debug_spec, seed=5)
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(pa, pb), name


def test_mxfp8_layer_close_to_fp32(debug_spec) -> None:
    x = torch.randn(1, 32, debug_spec.dim)
    ref = build_layer(debug_spec, precision="fp32", seed=2)(x).detach()
    mx_layer = build_layer(debug_spec, precision="mxfp8", seed=2)
    assert mx_layer.moe.gemm.emulated
    out = mx_layer(x.bfloat16()).detach().float()
    assert float((out - ref).norm() / ref.norm()) < 2e-2


def test_bad_config_messages(debug_spec) -> None:
    with pytest.raises(ConfigError, match=r"ep \(3\) must divide the number of routed experts \(8\)"):
        check_layer_config(debug_spec, "fp32", 3)
    odd = dataclasses.replace(debug_spec, dim=250)
    with pytest.raises(ConfigError, match=r"dim \(D\) \(250\) must be a multiple of 32"):
        check_layer_config(odd, "mxfp8", 1)
    check_layer_config(odd, "fp32", 1)
    from sim.catalog import load_model

    with pytest.raises(ConfigError, match="attention 'gqa'"):
        check_layer_config(load_model("qwen3-30b-a3b"), "bf16", 1)
