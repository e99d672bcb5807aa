"""Microbenchmarks for calibration (torch): ``python -m reference.bench GROUP --out FILE.json [--quick]``.

Groups: ``gemm`` (dense GEMM over an (M, N, K) grid), ``grouped`` (``torch._grouped_mm`` over (M, N, K, G)),
``attn`` (scaled-dot-product attention), ``mem`` (copy / add: bytes moved), ``quant`` (MXFP8 quantize,
TorchAO, emulated on CPUs), ``a2a`` (``all_to_all_single`` over message and world sizes: gloo on CPU,
NCCL on GPU), ``interference`` (a GEMM while an all-to-all runs), ``deepep`` (dispatch/combine by SMs when
DeepEP is installed; otherwise skipped with the reason). Each timing is the minimum over repetitions
(the least-disturbed run on a shared machine). Calibrate (torch-free) runs this as a subprocess.

Shape letters: M rows, N output columns, K reduction, G groups, T tokens, H heads, d head dim.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

GROUPS = ("gemm", "grouped", "attn", "mem", "quant", "a2a", "interference", "deepep")


def _device(name: str) -> torch.device:
    return torch.device("cuda" if name == "cuda" else "cpu")


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timeit(fn: Callable[[], Any], dev: torch.device, *, budget_s: float = 0.15, reps_max: int = 30,
           wall: bool = False) -> float:
    """Minimum seconds of ``fn`` over repetitions within ``budget_s`` (at least 3 runs, after one warm-up).

    On CPUs compute is timed by this process's CPU time (``time.process_time``: one thread per process,
    so other jobs on a shared machine do not inflate it); ``wall=True`` (collectives, which wait) and
    GPUs use the wall clock."""
    fn()
    _sync(dev)
    clock = time.perf_counter if wall or dev.type == "cuda" else time.process_time
    best, spent, n = float("inf"), 0.0, 0
    while n < 3 or (spent < budget_s and n < reps_max):
        t0 = clock()
        fn()
        _sync(dev)
        dt = clock() - t0
        best, spent, n = min(best, dt), spent + dt, n + 1
    return max(best, 1e-7)


def _dtype(dev: torch.device) -> torch.dtype:
    return torch.bfloat16 if dev.type == "cuda" else torch.float32


def bench_gemm(dev: torch.device, quick: bool) -> list[dict[str, Any]]:
    sizes = (64, 256, 1024) if quick else (32, 64, 128, 256, 512, 1024)
    out = []
    dt = _dtype(dev)
    for m in sizes:
        for n in sizes:
            for k in sizes:
                if quick and not (m == n == k):
                    continue
                if not quick and len({m, n, k}) == 3 and (m * n * k) % 7:
                    continue  # a thinned grid: squares, two-equal shapes and a few others
                a, b = torch.randn(m, k, device=dev, dtype=dt), torch.randn(k, n, device=dev, dtype=dt)
                s = timeit(lambda: a @ b, dev)
                out.append({"M": m, "N": n, "K": k, "flops": 2.0 * m * n * k, "seconds": s, "dtype": str(dt)})
    return out


def bench_grouped(dev: torch.device, quick: bool) -> list[dict[str, Any]]:
    out = []
    dt = _dtype(dev)
    grid = ((256, 128, 256, 4), (1024, 128, 256, 8)) if quick else \
        tuple((m, n, k, g) for m in (256, 1024, 4096) for (n, k) in ((128, 256), (256, 128), (256, 512), (512, 256))
              for g in (4, 8))
    for m, n, k, g in grid:
        x = torch.randn(m, k, device=dev, dtype=dt)
        w = torch.randn(g, k, n, device=dev, dtype=dt)
        offs = torch.arange(1, g + 1, device=dev, dtype=torch.int32) * (m // g)
        try:
            s = timeit(lambda: torch._grouped_mm(x, w, offs=offs), dev)
            kernel = "torch._grouped_mm"
        except (RuntimeError, NotImplementedError):
            chunks = list(x.split(m // g))
            s = timeit(lambda: [c @ w[i] for i, c in enumerate(chunks)], dev)
            kernel = "loop of mm"
        out.append({"M": m, "N": n, "K": k, "G": g, "flops": 2.0 * m * n * k, "seconds": s, "kernel": kernel})
    return out


def bench_attn(dev: torch.device, quick: bool) -> list[dict[str, Any]]:
    """Causal SDPA with MLA head dims (query/key dim != value dim, as the reference's MLA; on CPUs this
    takes the math path that materialises the scores) and, for reference, equal dims."""
    out = []
    dt = _dtype(dev)
    grid = ((256, 4, 64, 32),) if quick else tuple((t, 4, 64, 32) for t in (128, 256, 512, 1024, 2048)) + (
        (512, 8, 64, 32), (512, 4, 64, 64), (2048, 4, 64, 64))
    for t, h, dqk, dv in grid:
        q, k = (torch.randn(1, h, t, dqk, device=dev, dtype=dt, requires_grad=True) for _ in range(2))
        v = torch.randn(1, h, t, dv, device=dev, dtype=dt, requires_grad=True)
        fwd = timeit(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), dev)

        def fwd_bwd() -> None:
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.sum().backward()

        both = timeit(fwd_bwd, dev)
        flops = 2.0 * t * h * (dqk + dv) * (t + 1) / 2  # causal: each query sees (T+1)/2 keys
        out.append({"T": t, "H": h, "d_qk": dqk, "d_v": dv, "mla": dqk != dv, "flops_fwd": flops, "fwd_s": fwd,
                    "bwd_s": max(both - fwd, 1e-7)})
    return out


def bench_mem(dev: torch.device, quick: bool) -> list[dict[str, Any]]:
    out = []
    dt = _dtype(dev)
    for n in ((1 << 16, 1 << 20) if quick else (1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22)):
        a, b = torch.randn(n, device=dev, dtype=dt), torch.randn(n, device=dev, dtype=dt)
        c = torch.empty_like(a)
        s = timeit(lambda: torch.add(a, b, out=c), dev)
        out.append({"elems": n, "bytes": 3.0 * n * a.element_size(), "seconds": s, "op": "add"})
    return out


def bench_quant(dev: torch.device, quick: bool) -> list[dict[str, Any]]:
    os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
    try:
        from torchao.prototype.mx_formats.mx_tensor import to_mx
    except ImportError as err:
        return [{"skipped": f"torchao MXFP8 quantize unavailable: {err}"}]
    try:
        from torchao.prototype.mx_formats.utils import to_blocked
    except ImportError:
        to_blocked = None
    out: list[dict[str, Any]] = []
    for m, k in (((256, 256),) if quick else ((256, 256), (1024, 256), (1024, 1024))):
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        s = timeit(lambda: to_mx(x, torch.float8_e4m3fn, 32), dev)
        out.append({"elems": m * k, "seconds": s, "emulated": dev.type != "cuda", "kernel": "torchao to_mx"})
        if to_blocked is not None:  # the scale-rearrange (swizzle) kernel before a scaled GEMM
            scales = torch.randint(0, 255, (m, k // 32), device=dev, dtype=torch.uint8)
            s = timeit(lambda: to_blocked(scales), dev)
            out.append({"elems": m * k, "seconds": s, "emulated": dev.type != "cuda",
                        "kernel": "torchao to_blocked (scale rearrange)", "rearrange": True})
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _loopback_store(rank: int, world: int, port: int) -> Any:
    """The rendezvous store of the all-to-all benchmark: rank 0 listens on 127.0.0.1 only (a ``tcp://``
    init method would bind every interface)."""
    import datetime

    import torch.distributed as dist

    listen = None
    if rank == 0:
        listen = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listen.bind(("127.0.0.1", port))
    return dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=datetime.timedelta(seconds=300),
                         **({"master_listen_fd": listen.detach()} if listen is not None else {}))


def _a2a_worker(rank: int, world: int, port: int, quick: bool, interference: bool, q: Any) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's sockets on loopback, as the store's
    dist.init_process_group("gloo", store=_loopback_store(rank, world, port), rank=rank, world_size=world)
    dev = torch.device("cpu")
    rows = []
    try:
        if interference:
            a, b = torch.randn(256, 256), torch.randn(256, 256)
            alone = timeit(lambda: [a @ b for _ in range(20)], dev)
            buf = torch.randn(world * (1 << 18))
            dst = torch.empty_like(buf)
            dist.barrier()
            best = float("inf")
            for _ in range(5):
                work = dist.all_to_all_single(dst, buf, async_op=True)
                t0 = time.perf_counter()
                for _ in range(20):
                    a @ b
                best = min(best, time.perf_counter() - t0)
                assert work is not None
                work.wait()
            rows.append({"world": world, "gemm_alone_s": alone, "gemm_during_a2a_s": best})
        else:
            sizes = (1 << 10, 1 << 16) if quick else (1 << 8, 1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18)
            for per_peer in sizes:  # fp32 elements sent to each peer
                src = torch.randn(world * per_peer)
                dst = torch.empty_like(src)
                dist.barrier()
                s = timeit(lambda: dist.all_to_all_single(dst, src), dev, budget_s=0.1, reps_max=20, wall=True)
                rows.append({"world": world, "bytes_per_rank": 4.0 * world * per_peer, "seconds": s})
        if rank == 0:
            q.put(rows)
    finally:
        dist.destroy_process_group()


def bench_a2a(quick: bool, interference: bool = False) -> list[dict[str, Any]]:
    import torch.multiprocessing as mp

    out: list[dict[str, Any]] = []
    ctx = mp.get_context("spawn")
    for world in ((2,) if quick or interference else (2, 4)):
        q = ctx.Queue()
        port = _free_port()
        procs = [ctx.Process(target=_a2a_worker, args=(r, world, port, quick, interference, q)) for r in range(world)]
        for p in procs:
            p.start()
        rows = None
        deadline = time.monotonic() + 300
        while rows is None:
            try:
                rows = q.get(timeout=1.0)
            except queue.Empty:
                failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if failed or time.monotonic() > deadline:
                    for p in procs:
                        p.kill()
                    raise RuntimeError(f"all_to_all benchmark at world size {world}: "
                                       + (f"a rank exited with {failed[0]}" if failed else "timed out")) from None
        for p in procs:
            p.join(timeout=60)
        out.extend(rows)
    return out


def bench_deepep(dev: torch.device) -> list[dict[str, Any]]:
    try:
        import deep_ep  # noqa: F401
    except ImportError:
        return [{"skipped": "deep_ep is not installed (DeepEP needs NVSHMEM and SM90+ GPUs)"}]
    if dev.type != "cuda":
        return [{"skipped": "DeepEP needs a CUDA device"}]
    return [{"skipped": "DeepEP sweep needs a multi-GPU launch (torchrun); not run from a single process"}]


def run_group(group: str, device: str, quick: bool) -> list[dict[str, Any]]:
    dev = _device(device)
    if dev.type == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if group == "gemm":
        return bench_gemm(dev, quick)
    if group == "grouped":
        return bench_grouped(dev, quick)
    if group == "attn":
        return bench_attn(dev, quick)
    if group == "mem":
        return bench_mem(dev, quick)
    if group == "quant":
        return bench_quant(dev, quick)
    if group == "a2a":
        return bench_a2a(quick)
    if group == "interference":
        return bench_a2a(quick, interference=True)
    if group == "deepep":
        return bench_deepep(dev)
    raise SystemExit(f"unknown group {group!r}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reference.bench")
    p.add_argument("group", choices=GROUPS)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    rows = run_group(args.group, args.device, args.quick)
    text = json.dumps({"group": args.group, "device": args.device, "threads": torch.get_num_threads(),
                       "torch": torch.__version__, "rows": rows})
    tmp = args.out + ".partial"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
