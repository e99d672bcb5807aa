"""One decoder layer of the DeepSeek-V3 family, built from a :class:`sim.specs.ModelSpec`.

``x + MLA(RMSNorm(x))``, then ``h + FFN(RMSNorm(h))`` where the FFN is a dense SwiGLU for the first
``n_dense_layers`` layers and the MoE block after that.

Shape letters: B sequences, S sequence length, T = B*S tokens, D model dim.

>>> from sim.catalog import load_model
>>> from reference.layer import build_layer
>>> layer = build_layer(load_model("debug"), layer_id=1, precision="fp32", seed=0)
>>> x = torch.randn(2, 8, 256)
>>> layer(x).shape
torch.Size([2, 8, 256])
"""

from __future__ import annotations

import torch
from torch import nn
from torch.profiler import record_function

from reference import names
from reference.attention import MLA
from reference.dispatch.base import Dispatcher
from reference.dispatch.local import LocalDispatcher
from reference.errors import ConfigError
from reference.experts import GemmBackend, check_mxfp8_shapes, make_gemm
from reference.ffn import SwiGLU
from reference.moe import MoE
from reference.norm import RMSNorm
from sim.specs import ModelSpec

__all__ = ["DecoderLayer", "build_layer", "check_layer_config"]


class DecoderLayer(nn.Module):
    """Layer ``layer_id`` of ``spec``: MLA attention and a dense or MoE FFN."""

    def __init__(self, spec: ModelSpec, layer_id: int, gemm: GemmBackend, dispatcher: Dispatcher | None) -> None:
        super().__init__()
        if not 0 <= layer_id < spec.n_layers:
            raise ConfigError(
                f"layer_id ({layer_id}) must lie in [0, n_layers ({spec.n_layers})) of model {spec.name!r}"
            )
        self.spec = spec
        self.layer_id = layer_id
        self.is_moe = layer_id >= spec.n_dense_layers
        self.attn_norm = RMSNorm(spec.dim)
        self.attn = MLA(spec)
        self.ffn_norm = RMSNorm(spec.dim)
        if self.is_moe:
            if dispatcher is None:
                raise ValueError("an MoE layer needs a dispatcher")
            self.moe: MoE | None = MoE(spec, gemm, dispatcher)
            self.mlp: SwiGLU | None = None
        else:
            self.moe = None
            self.mlp = SwiGLU(spec.dim, spec.dense_inter_dim)

    def init_weights(self, seed: int, std: float = 0.02, bias_std: float = 0.0) -> None:
        """Deterministic weights from ``seed``: identical on every rank and device (experts sliced)."""
        generator = torch.Generator().manual_seed(seed)
        self.attn_norm.init_weights(generator)
        self.attn.init_weights(generator, std=std)
        self.ffn_norm.init_weights(generator)
        if self.moe is not None:
            self.moe.init_weights(generator, std=std, bias_std=bias_std)
        else:
            assert self.mlp is not None
            self.mlp.init_weights(generator, std=std)

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        """Causal layer over B sequences of S tokens: (B, S, D) -> (B, S, D)."""
        B, S, D = x_BSD.shape
        with record_function(names.ATTN_NORM):
            h_BSD = self.attn_norm(x_BSD)
        x_BSD = x_BSD + self.attn(h_BSD)
        if self.moe is not None:
            with record_function(names.MOE_NORM):
                h_BSD = self.ffn_norm(x_BSD)
            return x_BSD + self.moe(h_BSD.reshape(B * S, D)).view(B, S, D)
        assert self.mlp is not None
        with record_function(names.MLP_DENSE):
            return x_BSD + self.mlp(self.ffn_norm(x_BSD))


def check_layer_config(spec: ModelSpec, precision: str, ep: int) -> None:
    """Raise ConfigError for every reason ``spec`` cannot run at ``precision`` with EP degree ``ep``."""
    from reference.dispatch.base import check_ep

    if spec.attention != "mla":
        raise ConfigError(
            f"model {spec.name!r}: the reference implements the DeepSeek-V3 family (attention 'mla'), "
            f"but this model uses attention {spec.attention!r}"
        )
    check_ep(spec.n_routed_experts, ep)
    if precision == "mxfp8":
        check_mxfp8_shapes(**{"dim (D)": spec.dim, "moe_inter_dim (F)": spec.moe_inter_dim})


def build_layer(
    spec: ModelSpec,
    layer_id: int | None = None,
    *,
    precision: str = "fp32",
    dispatcher: Dispatcher | None = None,
    device: torch.device | str = "cpu",
    seed: int = 0,
    bias_std: float = 0.0,
    mxfp8_kernels: str = "auto",
) -> DecoderLayer:
    """A ready-to-run layer: validated config, weights from ``seed``, on ``device`` in the GEMM
    backend's activation dtype. ``layer_id`` defaults to the first MoE layer; ``dispatcher`` to local."""
    dispatcher = dispatcher or LocalDispatcher(spec.n_routed_experts)
    check_layer_config(spec, precision, dispatcher.ep_size)
    gemm = make_gemm(precision, device, mxfp8_kernels=mxfp8_kernels)
    layer_id = spec.n_dense_layers if layer_id is None else layer_id
    layer = DecoderLayer(spec, layer_id, gemm, dispatcher)
    layer.init_weights(seed, bias_std=bias_std)
    return layer.to(device=device, dtype=gemm.dtype)
