"""Helpers for testing the reference across processes: a free-port picker, a spawner whose failing or
hanging workers cannot hang the caller, and the expert-parallel equivalence check.

The equivalence check builds the full-size layer from one seed in every process (each rank keeps its
slice of experts), runs it on this rank's share of one global batch, and compares outputs and
gradients with the single-process layer run on the whole batch.

Shape letters: B sequences, S sequence length, D model dim.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

__all__ = ["free_port", "spawn", "ep_equivalence_worker", "compare_ep_to_local", "BACKEND_CASES"]

#: (name, dispatch backend, options) cases the equivalence worker knows.
BACKEND_CASES: dict[str, dict[str, Any]] = {
    "all_to_all": {"dispatch": "all_to_all"},
    "all_to_all_mxfp8_payload": {"dispatch": "all_to_all", "payload": "mxfp8"},
    "deepep_v1_fake": {"dispatch": "deepep", "api": "v1"},
    "deepep_v2_fake": {"dispatch": "deepep", "api": "v2"},
}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(fn: Callable[..., None], world_size: int, args: tuple, timeout_s: float = 120.0) -> list[int]:
    """Run ``fn(rank, world_size, port, *args)`` in ``world_size`` fresh processes; return exit codes.

    Processes still alive after ``timeout_s`` are killed (exit code -9), so a failing rank that leaves
    its peers blocked in a collective cannot hang the caller.
    """
    import multiprocessing as mp
    import time

    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=fn, args=(rank, world_size, port, *args)) for rank in range(world_size)]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.exitcode not in (None, 0):
            break  # one rank failed: do not wait the full timeout for the others
    time.sleep(0.5)
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    return [proc.exitcode if proc.exitcode is not None else -9 for proc in procs]


def _init(rank: int, world_size: int, port: int) -> None:
    os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
    torch.distributed.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=60),
    )
    torch.set_num_threads(1)


def _make_dispatcher(case: dict[str, Any], n_experts: int, model_dim: int) -> Any:
    import torch.distributed as dist

    if case["dispatch"] == "all_to_all":
        from reference.dispatch.all_to_all import AllToAllDispatcher

        return AllToAllDispatcher(n_experts, payload=case.get("payload", "native"), model_dim=model_dim)
    from reference.dispatch.deepep import DeepEPDispatcher
    from reference.dispatch.fake_deepep import FakeBuffer, FakeElasticBuffer

    buffer = FakeBuffer(None) if case["api"] == "v1" else FakeElasticBuffer(None)
    return DeepEPDispatcher(
        n_experts, buffer, api=case["api"], ep_rank=dist.get_rank(), ep_size=dist.get_world_size(),
        buffer_kind="fake",
    )


def compare_ep_to_local(
    case: dict[str, Any], model: str = "debug", seqs_per_rank: int = 2, seq_len: int = 16, seed: int = 0
) -> dict[str, float]:
    """Inside an initialised process group: max relative errors of the EP layer against the local one.

    Returns ``{"out": ..., "dx": ..., "dparam_replicated": ..., "dparam_experts": ...}``.
    """
    import torch.distributed as dist

    from reference.layer import build_layer
    from sim.catalog import load_model

    spec = load_model(model)
    rank, world = dist.get_rank(), dist.get_world_size()
    gen = torch.Generator().manual_seed(seed + 1)
    x_BSD = torch.randn((seqs_per_rank * world, seq_len, spec.dim), generator=gen)
    g_BSD = torch.randn((seqs_per_rank * world, seq_len, spec.dim), generator=gen)
    mine = slice(rank * seqs_per_rank, (rank + 1) * seqs_per_rank)

    ref = build_layer(spec, precision="fp32", seed=seed, bias_std=0.01)
    x_ref = x_BSD.clone().requires_grad_(True)
    out_ref = ref(x_ref)
    out_ref.backward(g_BSD)

    dispatcher = _make_dispatcher(case, spec.n_routed_experts, spec.dim)
    layer = build_layer(spec, precision="fp32", seed=seed, bias_std=0.01, dispatcher=dispatcher)
    x_ep = x_BSD[mine].clone().requires_grad_(True)
    out_ep = layer(x_ep)
    out_ep.backward(g_BSD[mine])

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).norm() / b.norm().clamp_min(1e-30))

    errors = {"out": rel(out_ep.detach(), out_ref.detach()[mine]), "dx": rel(x_ep.grad, x_ref.grad[mine])}
    ref_params = dict(ref.named_parameters())
    rep, exp = 0.0, 0.0
    experts = layer.moe.experts
    local = slice(experts.first_expert, experts.first_expert + experts.n_local)
    for name, param in layer.named_parameters():
        grad = param.grad if param.grad is not None else torch.zeros_like(param)
        if name.startswith("moe.experts."):
            exp = max(exp, rel(grad, ref_params[name].grad[local]))
        else:
            summed = grad.clone()
            dist.all_reduce(summed)
            rep = max(rep, rel(summed, ref_params[name].grad))
    errors["dparam_replicated"], errors["dparam_experts"] = rep, exp
    return errors


def ep_equivalence_worker(rank: int, world_size: int, port: int, cases: list[str], out_dir: str) -> None:
    """Spawn target: run ``compare_ep_to_local`` for each named case, write ``rank{r}.json``."""
    results: dict[str, Any] = {}
    try:
        _init(rank, world_size, port)
        for name in cases:
            results[name] = compare_ep_to_local(BACKEND_CASES[name])
    except BaseException:  # report, then exit non-zero: the parent reads the file
        results["error"] = traceback.format_exc()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    if "error" in results:
        os._exit(1)
    torch.distributed.destroy_process_group()


def failing_rank_worker(rank: int, world_size: int, port: int) -> None:
    """Spawn target for testing ``spawn`` itself: rank 1 dies while rank 0 waits in a collective."""
    _init(rank, world_size, port)
    if rank == 1:
        os._exit(3)
    torch.distributed.all_reduce(torch.ones(1))  # would block until the process-group timeout
