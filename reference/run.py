"""Run, time and profile one decoder layer: ``python -m reference.run`` / ``torchrun -m reference.run``.

    torchrun --nproc-per-node 2 -m reference.run --model debug --ep 2 --dispatch all_to_all \\
        --precision mxfp8 --tokens 256 --steps 3 --profile out/ref-debug

Each process is one expert-parallel rank holding ``E / ep`` experts and ``--tokens`` tokens
(``--tokens / --seq-len`` sequences). A step is the layer's forward and backward. After ``--warmup``
steps, ``--steps`` steps are timed (CUDA events on GPU, wall clock on CPU), then ``--profile-steps``
more run under ``torch.profiler``; their ranges carry the simulator's op names (:mod:`sim.ops`).
``--profile DIR`` receives ``trace_rank<r>.json`` (Kineto/Chrome trace) per rank and ``meta.json``.

Without torchrun, ``--ep N`` (N > 1) starts N local worker processes itself (gloo on CPU, NCCL on GPU),
so ``python -m reference.run`` and ``moesim reference`` need no launcher.

Every input is checked before anything is created or any process group exists: a bad input prints
one ``error:`` line and exits with code 2. Outputs are written to ``DIR.partial`` and renamed to
``DIR`` only when complete (ranks must share a filesystem).

Shape letters: T tokens per rank, S sequence length, B sequences per rank, D model dim.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from sim.errors import MoesimError
from sim.fileio import write_atomic

__all__ = ["RunConfig", "exit_now", "parse_args", "validate", "main", "partial_dir"]

PRECISIONS = ("fp32", "bf16", "mxfp8")
DISPATCHES = ("local", "all_to_all", "deepep")
MAX_TOKENS = 1 << 24  # tokens per rank per step
MAX_STEPS = 100_000
MAX_EP = 1024
MAX_TIMEOUT_S = 7 * 86400.0


@dataclass(frozen=True)
class RunConfig:
    """Validated settings of one reference run."""

    model: str
    layer_id: int
    ep: int
    precision: str
    dispatch: str
    deepep_api: str
    deepep_buffer: str
    a2a_payload: str
    mxfp8_kernels: str
    tokens: int
    seq_len: int
    steps: int
    warmup: int
    profile_steps: int
    profile: str | None
    device: str
    seed: int
    timeout_s: float
    under_launcher: bool


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors on one line (``prog: error: ...``), exit 2, as the ``moesim`` command's own parsers."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (a malformed one: one line on stderr, exit code 2)."""
    p = _OneLineParser(
        prog="python -m reference.run",
        description="Time and profile one DeepSeek-V3-family decoder layer (forward + backward).",
    )
    p.add_argument("--model", default="debug", help="catalog model name or model file (default: debug)")
    p.add_argument("--layer", type=int, default=None, help="layer index (default: the first MoE layer)")
    p.add_argument("--ep", type=int, default=None, help="expert-parallel degree (default: the world size)")
    p.add_argument("--precision", choices=PRECISIONS, default="bf16", help="routed-expert GEMMs")
    p.add_argument("--dispatch", choices=DISPATCHES, default=None,
                   help="token dispatch backend (default: local for ep 1, all_to_all otherwise)")
    p.add_argument("--deepep-api", choices=("v1", "v2"), default="v1", help="DeepEP Buffer (v1) or ElasticBuffer (v2)")
    p.add_argument("--deepep-buffer", choices=("real", "fake"), default="real",
                   help="'fake' runs the deepep path on the CPU stand-in (tests)")
    p.add_argument("--a2a-payload", choices=("native", "mxfp8"), default="native",
                   help="all_to_all dispatch payload (mxfp8: quantised tokens sent as bytes)")
    p.add_argument("--mxfp8-kernels", choices=("auto", "real", "emulated"), default="auto")
    p.add_argument("--tokens", type=int, default=256, help="tokens per rank per step (T)")
    p.add_argument("--seq-len", type=int, default=None, help="sequence length S (default: min(T, 4096))")
    p.add_argument("--steps", type=int, default=3, help="timed steps")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up steps")
    p.add_argument("--profile-steps", type=int, default=1, help="profiled steps (with --profile)")
    p.add_argument("--profile", metavar="DIR", default=None, help="write traces and meta.json here")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=600.0, help="collective and launcher timeout")
    return p.parse_args(argv)


def _env_world() -> tuple[int, int, int] | None:
    if "WORLD_SIZE" not in os.environ:
        return None
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))


def validate(args: argparse.Namespace) -> RunConfig:
    """Check every input; raise a MoesimError naming the problem. Creates nothing."""
    import torch

    from reference.dispatch.base import check_ep
    from reference.errors import BackendUnavailableError, ConfigError
    from reference.experts import make_gemm
    from reference.layer import check_layer_config
    from sim.catalog import load_model

    spec = load_model(args.model)
    world = _env_world()
    ep = args.ep if args.ep is not None else (world[1] if world else 1)
    for name, value, low, high in (("--tokens", args.tokens, 1, MAX_TOKENS), ("--steps", args.steps, 1, MAX_STEPS),
                                   ("--warmup", args.warmup, 0, MAX_STEPS),
                                   ("--profile-steps", args.profile_steps, 1, MAX_STEPS), ("--ep", ep, 1, MAX_EP),
                                   ("--seed", args.seed, 0, 2**63 - 1)):
        if value < low:
            raise ConfigError(f"{name} must be at least {low}, got {value}")
        if value > high:
            raise ConfigError(f"{name} must be at most {high}, got {value}")
    if args.seq_len is not None and not 1 <= args.seq_len <= MAX_TOKENS:
        raise ConfigError(f"--seq-len must lie in [1, {MAX_TOKENS}], got {args.seq_len}")
    if not math.isfinite(args.timeout_s) or not 0 < args.timeout_s <= MAX_TIMEOUT_S:
        raise ConfigError(f"--timeout-s must be a positive number of seconds, at most {MAX_TIMEOUT_S:g}, "
                          f"got {args.timeout_s}")
    if world is not None and ep != world[1]:
        raise ConfigError(
            f"--ep ({ep}) must equal the number of processes ({world[1]}): the reference runs one "
            "expert-parallel group"
        )
    check_ep(spec.n_routed_experts, ep)
    dispatch = args.dispatch or ("local" if ep == 1 else "all_to_all")
    if dispatch == "local" and ep != 1:
        raise ConfigError(f"--dispatch local runs all experts in one process; it needs --ep 1, got --ep {ep}")
    check_layer_config(spec, args.precision, ep)
    layer_id = spec.n_dense_layers if args.layer is None else args.layer
    if not 0 <= layer_id < spec.n_layers:
        raise ConfigError(f"--layer ({layer_id}) must lie in [0, n_layers ({spec.n_layers})) of model {spec.name!r}")
    seq_len = args.seq_len if args.seq_len is not None else min(args.tokens, 4096)
    if seq_len < 1 or args.tokens % seq_len:
        raise ConfigError(f"--tokens ({args.tokens}) must be a positive multiple of --seq-len ({seq_len})")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailableError("--device cuda: no CUDA GPU is visible to torch")
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda and ep > torch.cuda.device_count() and world is None:
        raise ConfigError(f"--ep ({ep}) exceeds the {torch.cuda.device_count()} visible GPUs of this machine")
    gemm = make_gemm(args.precision, "cuda" if use_cuda else "cpu", mxfp8_kernels=args.mxfp8_kernels)
    if not use_cuda:  # all ranks of a local run share this machine's RAM; refuse before allocating
        ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", 1)) if world is not None else ep
        check_memory(estimate_memory_bytes(spec, layer_id, ep, args.tokens, seq_len,
                                           torch.tensor([], dtype=gemm.dtype).element_size()), ranks_here)
    if dispatch == "all_to_all" and args.a2a_payload == "mxfp8" and spec.dim % 32:
        raise ConfigError(f"--a2a-payload mxfp8: model dim D ({spec.dim}) must be a multiple of 32")
    if dispatch == "deepep" and args.deepep_buffer == "real":
        from reference.dispatch.deepep import load_deepep

        load_deepep(args.deepep_api)
        if args.precision == "fp32":
            raise ConfigError("--dispatch deepep moves bf16 tokens: use --precision bf16 or mxfp8, not fp32")
        if not use_cuda:
            raise BackendUnavailableError("--dispatch deepep runs DeepEP's CUDA kernels: it needs GPUs (use --deepep-buffer fake on CPU)")
    profile = None
    if args.profile is not None:
        if not args.profile.strip():
            raise ConfigError("--profile needs a directory name, got ''")
        target = Path(args.profile)  # "out/" and "out" name the same directory
        profile = str(target)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise ConfigError(f"--profile {target}: already exists and is not an empty directory")
        parent = target.resolve().parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise ConfigError(f"--profile {target}: {parent} is not a directory")
        if not os.access(parent, os.W_OK) or not _can_create_in(parent):
            raise ConfigError(f"--profile {target}: cannot write under {parent} (read-only?)")
        partial = partial_dir(profile)
        if partial.exists() or partial.is_symlink():
            raise ConfigError(f"--profile {target}: {partial} already exists (an interrupted run's, or not "
                              "moesim's); it is never deleted by a run that did not create it: remove it or "
                              "choose another --profile")
    return RunConfig(
        model=args.model, layer_id=layer_id, ep=ep, precision=args.precision, dispatch=dispatch,
        deepep_api=args.deepep_api, deepep_buffer=args.deepep_buffer, a2a_payload=args.a2a_payload,
        mxfp8_kernels=args.mxfp8_kernels, tokens=args.tokens, seq_len=seq_len, steps=args.steps,
        warmup=args.warmup, profile_steps=args.profile_steps, profile=profile,
        device="cuda" if use_cuda else "cpu", seed=args.seed, timeout_s=args.timeout_s,
        under_launcher=world is not None,
    )


def estimate_memory_bytes(spec: Any, layer_id: int, ep: int, tokens: int, seq_len: int, dtype_bytes: int) -> int:
    """Bytes one rank allocates for the layer, from the model's dimensions: weights and gradients of the
    attention, norms, router, shared experts and its ``1/ep`` of the routed experts (or the dense FFN),
    and activations of ``tokens`` tokens (hidden states, ``top_k`` routed copies through the experts,
    ``seq_len x seq_len`` attention scores per head). A floor, not a bound: allocator slack comes on top.

    >>> from sim.catalog import load_model
    >>> round(estimate_memory_bytes(load_model("deepseek-v3-671b"), 3, 1, 256, 256, 2) / 1e9)
    46
    """
    from sim.accounting import count_params

    c = count_params(spec)
    dense = layer_id < spec.n_dense_layers
    ffn = c.dense_ffn_per_layer if dense else (c.router_per_layer + c.shared_experts_per_layer
                                                + -(-c.routed_experts_per_layer // max(1, ep)))
    params = c.attention_per_layer + c.norms_per_layer + ffn
    copies = 1 if dense else spec.top_k
    inter = spec.dense_inter_dim if dense else spec.moe_inter_dim
    activations = tokens * (12 * spec.dim + copies * (4 * spec.dim + 4 * inter)) + \
        2 * tokens * seq_len * spec.n_heads
    return int((2 * params + activations) * dtype_bytes)


def available_memory_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` (None where there is no such file)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(per_rank_bytes: int, ranks: int) -> None:
    """A :class:`~reference.errors.ConfigError` when ``ranks`` ranks of ``per_rank_bytes`` exceed the RAM
    available now (``MOESIM_REFERENCE_MEMORY_CHECK=0`` skips the check)."""
    from reference.errors import ConfigError

    available = available_memory_bytes()
    if available is None or os.environ.get("MOESIM_REFERENCE_MEMORY_CHECK", "1") == "0":
        return
    need = per_rank_bytes * max(1, ranks)
    if need > available:
        raise ConfigError(f"the layer needs about {need / 2**30:.1f} GiB ({ranks} rank(s) x {per_rank_bytes / 2**30:.1f} "
                          f"GiB of weights, gradients and activations), more than the {available / 2**30:.1f} GiB "
                          "of RAM available (MemAvailable); use a smaller --model or --tokens, a larger --ep, "
                          "or MOESIM_REFERENCE_MEMORY_CHECK=0 to run anyway")


def _can_create_in(folder: Path) -> bool:
    """Whether a directory can be made in ``folder`` (a probe, removed at once: root ignores mode bits)."""
    try:
        probe = tempfile.mkdtemp(prefix=".moesim-probe-", dir=folder)
    except OSError:
        return False
    os.rmdir(probe)
    return True


_LOCAL_LAUNCH_VAR = "MOESIM_REFERENCE_LOCAL_LAUNCH"
"""Set by :func:`launch` in its ranks: rank 0 serves the rendezvous store on ``MASTER_ADDR`` only."""


def rendezvous_addr() -> str:
    """Where :func:`launch`'s ranks meet: ``MOESIM_RENDEZVOUS_ADDR`` if the user asks for another address,
    else loopback (``127.0.0.1``): nothing listens on the machine's other interfaces."""
    return os.environ.get("MOESIM_RENDEZVOUS_ADDR", "").strip() or "127.0.0.1"


def _local_store(rank: int, world_size: int, timeout_s: float) -> dict[str, Any]:
    """``store``/``rank``/``world_size`` of ``init_process_group`` for ranks of :func:`launch`: rank 0's
    TCPStore listens on a socket bound to ``MASTER_ADDR`` only (torch's default store binds every
    interface). Empty under torchrun, whose agent owns the rendezvous."""
    if os.environ.get(_LOCAL_LAUNCH_VAR) != "1":
        return {}
    import socket

    import torch.distributed as dist

    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    listen: socket.socket | None = None
    if rank == 0:
        listen = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM)
        listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listen.bind((addr, port))
    store = dist.TCPStore(addr, port, world_size, rank == 0, timeout=datetime.timedelta(seconds=timeout_s),
                          **({"master_listen_fd": listen.detach()} if listen is not None else {}))
    return {"store": store, "rank": rank, "world_size": world_size}


def partial_dir(profile: str) -> Path:
    """Where a run writes before the final rename: ``DIR.partial`` beside ``DIR`` (never inside it)."""
    target = Path(profile)
    return target.with_name(target.name + ".partial")


def launch(config: RunConfig, argv: list[str]) -> int:
    """Start ``config.ep`` local worker processes of this module; return the first failing exit code."""
    from reference.testing import free_port

    port = free_port()
    procs = []
    os.environ[_RUN_ID_VAR] = run_id = f"{os.getpid()}-{time.time_ns()}"  # the ranks mark DIR.partial with it
    for rank in range(config.ep):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(config.ep),
                   LOCAL_WORLD_SIZE=str(config.ep), MASTER_ADDR=rendezvous_addr(), MASTER_PORT=str(port))
        env[_LOCAL_LAUNCH_VAR] = "1"  # the ranks bind their rendezvous store to MASTER_ADDR only
        if env["MASTER_ADDR"] == "127.0.0.1" and sys.platform.startswith("linux"):
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's own sockets on loopback too
        env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does: ranks must not oversubscribe cores
        procs.append(subprocess.Popen([sys.executable, "-m", "reference.run", *argv], env=env))
    deadline = time.monotonic() + config.timeout_s + 60
    code = 0
    received: list[int] = []

    def stop_ranks(signum: int, _frame: Any) -> None:  # SIGINT/SIGTERM/SIGHUP: end the ranks, then return
        nonlocal deadline
        received.append(signum)
        for proc in procs:
            with contextlib.suppress(OSError):
                proc.terminate()
        deadline = min(deadline, time.monotonic() + _STOP_GRACE_S)

    with _signals_to(stop_ranks):
        while procs and time.monotonic() < deadline:
            for proc in list(procs):
                rc = proc.poll()
                if rc is None:
                    continue
                procs.remove(proc)
                if rc != 0 and code == 0:
                    code = rc
                    deadline = min(deadline, time.monotonic() + 10)  # let peers report, then stop them
            time.sleep(0.05)
        for proc in procs:
            proc.kill()
            proc.wait()
            code = code or 1
    if received:
        code = 128 + received[0]
    if code and config.profile:
        _remove_own_partial(partial_dir(config.profile), run_id)
    return code


_RUN_ID_VAR = "MOESIM_REFERENCE_RUN"
_OWNER_FILE = ".moesim-run"  # inside DIR.partial: which run created it (removed before the final rename)
_STOP_GRACE_S = 5.0


@contextlib.contextmanager
def _signals_to(handler: Any) -> Iterator[None]:
    """``handler`` for SIGINT, SIGTERM and SIGHUP inside the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


class _Stopped(KeyboardInterrupt):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, _frame: Any) -> None:
    raise _Stopped(signum)


def _remove_own_partial(partial: Path, run_id: str) -> None:
    """Remove ``partial`` only if this run created it (its owner file holds ``run_id``)."""
    try:
        owner = (partial / _OWNER_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return
    if owner == run_id:
        shutil.rmtree(partial, ignore_errors=True)


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_worker(config: RunConfig, argv: list[str]) -> dict[str, Any]:
    """Build, time and profile the layer in this process; return the timing summary."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from reference.dispatch.base import Dispatcher
    from reference.dispatch.local import LocalDispatcher
    from reference.layer import build_layer
    from reference.meta import build_meta
    from sim.catalog import load_model

    spec = load_model(config.model)
    world = _env_world()
    rank, world_size, local_rank = world if world else (0, 1, 0)
    device = torch.device(f"cuda:{local_rank}" if config.device == "cuda" else "cpu")
    pg_backend = None
    if world is not None:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        pg_backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(pg_backend, timeout=datetime.timedelta(seconds=config.timeout_s),
                                **({"device_id": device} if device.type == "cuda" else {}),
                                **_local_store(rank, world_size, config.timeout_s))
    partial = partial_dir(config.profile) if config.profile else None
    done = created = False
    try:
        if partial is not None and rank == 0:
            partial.mkdir(parents=True)  # never over a folder someone else made (validate refused one)
            created = True
            (partial / _OWNER_FILE).write_text(os.environ.get(_RUN_ID_VAR, str(os.getpid())) + "\n",
                                               encoding="utf-8")
        if world is not None:
            dist.barrier()

        dispatcher: Dispatcher
        if config.dispatch == "local":
            dispatcher = LocalDispatcher(spec.n_routed_experts)
        elif config.dispatch == "all_to_all":
            from reference.dispatch.all_to_all import AllToAllDispatcher

            dispatcher = AllToAllDispatcher(spec.n_routed_experts, payload=config.a2a_payload, model_dim=spec.dim)
        else:
            from reference.dispatch.deepep import (
                DeepEPDispatcher,
                load_deepep,
                make_deepep_buffer,
            )
            from reference.dispatch.fake_deepep import FakeBuffer, FakeElasticBuffer

            if config.deepep_buffer == "fake":
                buffer_cls = FakeBuffer if config.deepep_api == "v1" else FakeElasticBuffer
            else:
                buffer_cls = load_deepep(config.deepep_api)
            group = dist.group.WORLD if world is not None else None
            buffer = make_deepep_buffer(buffer_cls, config.deepep_api, group, hidden=spec.dim,
                                        max_tokens=config.tokens, top_k=spec.top_k)
            dispatcher = DeepEPDispatcher(spec.n_routed_experts, buffer, api=config.deepep_api, ep_rank=rank,
                                          ep_size=world_size, buffer_kind=config.deepep_buffer)
        layer = build_layer(spec, config.layer_id, precision=config.precision, dispatcher=dispatcher,
                            device=device, seed=config.seed, mxfp8_kernels=config.mxfp8_kernels)
        gemm = layer.moe.gemm if layer.moe is not None else None
        dtype = next(layer.parameters()).dtype
        batch = config.tokens // config.seq_len
        gen = torch.Generator().manual_seed(config.seed * 1000 + rank + 1)
        x_BSD = torch.randn((batch, config.seq_len, spec.dim), generator=gen).to(device, dtype).requires_grad_(True)
        g_BSD = torch.randn((batch, config.seq_len, spec.dim), generator=gen).to(device, dtype)

        def step() -> None:
            out = layer(x_BSD)
            out.backward(g_BSD)
            layer.zero_grad(set_to_none=True)
            x_BSD.grad = None

        for _ in range(config.warmup):
            step()
        _sync(device)
        if world is not None:
            dist.barrier()
        step_s: list[float] = []
        cpu_s: list[float] = []  # this process's CPU time per step (immune to other jobs on a shared host)
        for _ in range(config.steps):
            c0 = time.process_time()
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                step()
                end.record()
                end.synchronize()
                step_s.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                step()
                step_s.append(time.perf_counter() - t0)
            cpu_s.append(time.process_time() - c0)

        traces: list[str] = []
        if partial is not None:
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
            with profile(activities=activities, record_shapes=True) as prof:
                for _ in range(config.profile_steps):
                    step()
                    _sync(device)
                    prof.step()
            prof.export_chrome_trace(str(partial / f"trace_rank{rank}.json"))
            traces = [f"trace_rank{r}.json" for r in range(world_size)]

        all_step_s = [step_s]
        if world is not None:
            all_step_s = [None] * world_size  # type: ignore[list-item]
            dist.all_gather_object(all_step_s, step_s)
        all_cpu_s = [cpu_s]
        if world is not None:
            all_cpu_s = [None] * world_size  # type: ignore[list-item]
            dist.all_gather_object(all_cpu_s, cpu_s)
        mean_s = sum(sum(s) for s in all_step_s) / sum(len(s) for s in all_step_s)
        timing = {
            "warmup_steps": config.warmup,
            "timed_steps": config.steps,
            "profiled_steps": config.profile_steps if partial is not None else 0,
            "clock": "cuda_events" if device.type == "cuda" else "perf_counter",
            "step_s_per_rank": all_step_s,
            "cpu_step_s_per_rank": all_cpu_s,
            "mean_step_s": mean_s,
            "tokens_per_s_per_rank": config.tokens / mean_s,
        }
        if rank == 0:
            shapes = {"T": config.tokens, "S": config.seq_len, "B": batch, "D": spec.dim, "F": spec.moe_inter_dim,
                      "E": spec.n_routed_experts, "e": dispatcher.n_local, "K": spec.top_k, "H": spec.n_heads}
            gemm_info = (
                {"precision": gemm.precision, "kernel": gemm.kernel, "emulated": gemm.emulated,
                 "alignment": gemm.alignment, "activation_dtype": str(gemm.dtype).replace("torch.", "")}
                if gemm is not None else {"precision": config.precision, "kernel": "dense layer: nn.Linear"}
            )
            meta = build_meta(
                spec=spec, layer_id=config.layer_id, is_moe=layer.is_moe, shapes=shapes, gemm=gemm_info,
                dispatch=dispatcher.describe(), device=device, world_size=world_size, process_group=pg_backend,
                timing=timing, traces=traces, argv=["reference.run", *argv],
            )
            if partial is not None:
                write_atomic(partial / "meta.json", json.dumps(meta, indent=2) + "\n")
            print(
                f"reference: {spec.name} layer {config.layer_id} ep={world_size} precision={config.precision}"
                f"{' (' + gemm.kernel + ')' if gemm else ''} dispatch={config.dispatch}: "
                f"{mean_s * 1e3:.2f} ms/step, {timing['tokens_per_s_per_rank']:.0f} tokens/s per rank",
                flush=True,
            )
        if world is not None:
            dist.barrier()
        if partial is not None and rank == 0:
            target = Path(config.profile)  # type: ignore[arg-type]
            if target.is_dir():
                target.rmdir()  # validated empty
            (partial / _OWNER_FILE).unlink()
            partial.rename(target)
            print(f"reference: wrote {target}/ (meta.json, {len(traces)} trace(s))", flush=True)
        done = True
        return timing
    finally:
        if not done and created and partial is not None:
            shutil.rmtree(partial, ignore_errors=True)
        if world is not None and dist.is_initialized():
            dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """Entry point: validate, then run here or launch ``--ep`` local workers. Returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
    args = parse_args(argv)
    missing = [name for name in ("torch", "torchao") if importlib.util.find_spec(name) is None]
    if missing:
        print(f"moesim reference: error: the reference needs {' and '.join(missing)}, which this environment "
              "lacks; install it with: pip install 'moesim[reference]' (on GPUs, the CUDA build of torch first)",
              file=sys.stderr)
        return 2
    try:
        config = validate(args)
        if (config.ep > 1 or config.dispatch != "local") and not config.under_launcher:
            return launch(config, argv)
        with _signals_to(_stop):  # SIGTERM/SIGHUP too run run_worker's cleanup (DIR.partial removed)
            run_worker(config, argv)
    except _Stopped as stop:
        print(f"moesim reference: stopped by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return 128 + stop.signum
    except MoesimError as exc:
        print(f"moesim reference: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the output folder became unwritable or the disk filled during the run
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"moesim reference: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def exit_now(code: int) -> None:
    """End the process with ``code`` once the run is written, without C++ static destructors: after a profiled
    run kineto's teardown at interpreter exit can abort the process ("terminate called without an active
    exception", exit 134; pytorch/pytorch PR #195837, pytorch/kineto #1051), turning a finished run into a
    failure. Python's own buffers are flushed first."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
