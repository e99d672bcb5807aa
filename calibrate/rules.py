"""Read a real training job's Kineto trace by kernel-name rules: kernels -> ops, phases, shapes -> samples.

Rules (first match wins, case-sensitive substrings of the demangled kernel name, see :data:`RULES`):
DeepEP ``internode::dispatch`` / ``combine`` (and ``intranode::``) are the all-to-all; ``notify_dispatch``
and ``cached_notify`` the count exchange and barrier before them; DeepSeek's ``m_grouped_fp8`` GEMMs the
routed experts, ``fp8_dptp128c_acc`` the weight-gradient GEMMs, ``fp8_ptp128c`` the dense FP8 GEMMs;
FlashAttention forward / backward; cuBLAS ``xmma_gemm_bf16`` (the router); cast / transpose kernels
(quantisation), norms, and every other kernel as memory-bound.

A kernel's phase is the host annotation (``attn(F)``, ``mlp(B)``, ...) around the runtime call
(``cudaLaunchKernel``) that launched it (linked by ``correlation``); its layer is the occurrence of that
annotation. Shapes: the trace records no input shapes (no ``Input Dims``), so each GEMM's size comes
from the run's known configuration (:class:`RunShapes`, DeepSeek-V3 at EP64, seq 4096, one microbatch of
4096 tokens per rank, balanced routing) by its position within its phase: :data:`DSV3_SLOTS`.

Shape letters: T tokens per rank, D model dim, F expert hidden, E experts, e local experts, K top-k,
H heads, R expert rows per rank (T*K under balanced routing).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from calibrate.fit import Sample
from sim import ops
from sim.costs import GROUPED_REF_GROUPS

__all__ = ["RULES", "classify", "launch_gaps", "RunShapes", "DSV3_SLOTS", "Kernel", "TraceReading", "read_job_trace",
           "PHASE_RE"]

#: (substring, family) in priority order.
RULES: tuple[tuple[str, str], ...] = (
    ("internode::dispatch", "deepep.dispatch"), ("intranode::dispatch", "deepep.dispatch"),
    ("internode::combine", "deepep.combine"), ("intranode::combine", "deepep.combine"),
    ("notify_dispatch", "deepep.notify"), ("cached_notify", "deepep.notify"), ("notify_combine", "deepep.notify"),
    ("get_dispatch_layout", "deepep.layout"),
    ("m_grouped_fp8", "gemm.grouped_fp8"), ("fp8_dptp128c_acc", "gemm.wgrad_fp8"), ("fp8_ptp128c", "gemm.fp8"),
    ("FlashAttnBwdPreprocess", "mem.attn"), ("FlashAttnBwdPostprocess", "mem.attn"),
    ("FlashAttnBwd", "attn.bwd"), ("flash_bwd", "attn.bwd"),
    ("flash::compute_attn", "attn.fwd"), ("flash_fwd", "attn.fwd"), ("FlashAttnFwd", "attn.fwd"),
    ("xmma_gemm_bf16", "gemm.bf16"), ("gemm_bf16", "gemm.bf16"),
    ("layer_norm", "mem.norm"), ("rms_norm", "mem.norm"),
    ("cast", "mem.quant"), ("transpose", "mem.quant"),
    ("expand_to_fused", "mem.permute"), ("get_fused_mapping", "mem.permute"), ("clean_and_count", "mem.permute"),
    ("reduce_fused", "mem.unpermute"), ("swiglu", "mem.act"), ("rotary", "mem.attn"),
)
PHASE_RE = re.compile(r"^(attn|mlp|dispatch|combine)\((F|B|W)\)$")
_MEM_OPS = {"deepep.layout": ops.A2A_COUNT_EXCHANGE, "mem.norm": ops.ATTN_NORM, "mem.quant": ops.MOE_QUANTIZE, "mem.permute": ops.MOE_PERMUTE,
            "mem.unpermute": ops.MOE_UNPERMUTE, "mem.act": ops.MOE_EXPERT_GEMM, "mem.attn": ops.ATTN_CORE}


def classify(name: str) -> str:
    """The family of a kernel by name (``mem.other`` when no rule matches).

    >>> classify("void dpsk::ep::internode::dispatch<false, 8, false, 8>(int4*)")
    'deepep.dispatch'
    >>> classify("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel>")
    'gemm.grouped_fp8'
    """
    for needle, family in RULES:
        if needle in name:
            return family
    return "mem.other"


@dataclass(frozen=True)
class RunShapes:
    """The traced run's configuration (DeepSeek-V3, EP64, TP1, seq 4096; measured-runs.md s3)."""

    T: int = 4096
    S: int = 4096
    D: int = 7168
    H: int = 128
    q_lora: int = 1536
    kv_lora: int = 512
    qk_nope: int = 128
    qk_rope: int = 64
    v_dim: int = 128
    F: int = 2048
    E: int = 256
    K: int = 8
    ep: int = 64
    shared_F: int = 2048
    #: distinct nodes a token reaches, the sender's own included: 3.63 with DeepSeek-V3's 4-node limit
    #: (published.md s6, DERIVED) -- the "logical" bytes DeepEP's benchmark counts.
    nodes_per_token: float = 3.63
    dispatch_bytes_per_token: float = 7392.0  # FP8 + scales (published.md s6)
    combine_bytes_per_token: float = 14336.0  # BF16
    source: str = "measured-runs.md s3 (EP64, TP1, seq 4096, balanced routing); DeepSeek-V3 config (published.md s2)"

    @property
    def R(self) -> int:  # noqa: N802  (shape letter)
        return self.T * self.K


def grouped_curve_rows(rows: float, sh: RunShapes) -> float:
    """A traced grouped GEMM's position on the grouped-GEMM curve: rows per local expert times the
    curve's reference group count (:data:`sim.costs.GROUPED_REF_GROUPS`), as ``predict`` reads it."""
    return float(rows) / (sh.E / sh.ep) * GROUPED_REF_GROUPS


def _gemm(op: str, phase: str, m: float, k: float, n: float) -> tuple[str, str, float, float]:
    return op, phase, 2.0 * m * k * n, m


def dsv3_slots(sh: RunShapes) -> dict[tuple[str, str], list[tuple[str, str, float, float]]]:
    """(phase annotation, family) -> the GEMMs in launch order: (op, pass, FLOPs, rows)."""
    T, D, H, R, F, sF = sh.T, sh.D, sh.H, sh.R, sh.F, sh.shared_F
    q_a = (ops.ATTN_Q_PROJ, T, D, sh.q_lora)
    kv_a = (ops.ATTN_KV_PROJ, T, D, sh.kv_lora + sh.qk_rope)
    q_b = (ops.ATTN_Q_PROJ, T, sh.q_lora, H * (sh.qk_nope + sh.qk_rope))
    kv_b = (ops.ATTN_KV_PROJ, T, sh.kv_lora, H * (sh.qk_nope + sh.v_dim))
    o = (ops.ATTN_O_PROJ, T, H * sh.v_dim, D)

    def fwd(g: tuple[str, float, float, float]) -> tuple[str, str, float, float]:
        return _gemm(g[0], "fwd", g[1], g[2], g[3])

    def dgrad(g: tuple[str, float, float, float]) -> tuple[str, str, float, float]:
        return _gemm(g[0], "dgrad", g[1], g[3], g[2])

    def wgrad(g: tuple[str, float, float, float]) -> tuple[str, str, float, float]:
        return _gemm(g[0], "wgrad", g[1], g[2], g[3])

    sh_up, sh_down = (ops.MOE_SHARED_EXPERT, T, D, 2 * sF), (ops.MOE_SHARED_EXPERT, T, sF, D)
    ex_up, ex_down = (ops.MOE_EXPERT_GEMM, R, D, 2 * F), (ops.MOE_EXPERT_GEMM, R, F, D)
    router = (ops.MOE_ROUTER, T, D, sh.E)
    return {
        ("attn(F)", "gemm.fp8"): [fwd(q_a), fwd(kv_a), fwd(q_b), fwd(kv_b), fwd(o)],
        # recompute of q_b / kv_b before the attention backward (activation memory), then the dgrads.
        ("attn(B)", "gemm.fp8"): [dgrad(o), fwd(q_b), fwd(kv_b), dgrad(q_b), dgrad(kv_b), dgrad(kv_a), dgrad(q_a)],
        ("attn(W)", "gemm.wgrad_fp8"): [wgrad(o), wgrad(kv_b), wgrad(q_b), wgrad(kv_a), wgrad(q_a)],
        ("attn(F)", "gemm.bf16"): [fwd(router)],
        ("attn(B)", "gemm.bf16"): [dgrad(router), wgrad(router)],
        ("mlp(F)", "gemm.fp8"): [fwd(sh_up), fwd(sh_down)],
        ("mlp(F)", "gemm.grouped_fp8"): [fwd(ex_up), fwd(ex_down)],
        ("mlp(B)", "gemm.fp8"): [dgrad(sh_down), dgrad(sh_up)],
        ("mlp(B)", "gemm.grouped_fp8"): [dgrad(ex_down), dgrad(ex_up)],
    }


#: The slots of the default run (see :func:`dsv3_slots`).
DSV3_SLOTS = dsv3_slots(RunShapes())


@dataclass(frozen=True)
class Kernel:
    """One GPU kernel of the trace, attributed."""

    name: str
    family: str
    stream: str
    start_s: float
    seconds: float
    phase: str
    layer: int
    grid0: int = 0


@dataclass
class TraceReading:
    """What a job trace gave: kernels (attributed), samples (with shapes), notes on what was inferred."""

    kernels: list[Kernel]
    samples: list[Sample]
    device: str
    num_sms: int
    window_s: float
    notes: list[str] = field(default_factory=list)
    shapes: RunShapes = field(default_factory=RunShapes)


def _intervals_overlap(a0: float, a1: float, spans: Sequence[tuple[float, float]], starts: Sequence[float]) -> float:
    i = max(0, bisect_right(starts, a0) - 1)
    total = 0.0
    while i < len(spans) and spans[i][0] < a1:
        total += max(0.0, min(a1, spans[i][1]) - max(a0, spans[i][0]))
        i += 1
    return total


def _union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, -1e300
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def read_job_trace(events: Sequence[Mapping[str, Any]], shapes: RunShapes | None = None) -> TraceReading:
    """Attribute a real job's kernels (DeepSeek's H800 trace style) and build fit samples."""
    sh = shapes or RunShapes()
    slots = dsv3_slots(sh)
    notes = ["shapes: the trace has no recorded input shapes; GEMM sizes from the run's known config "
             f"({sh.source}), matched by launch order within each phase"]
    device, num_sms = "unknown", 132
    phases = sorted(((float(e["ts"]), float(e["ts"]) + float(e["dur"]), str(e["name"])) for e in events
                     if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                     and PHASE_RE.match(str(e.get("name", "")))), key=lambda p: p[0])
    launches: dict[Any, float] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launches[corr] = float(e["ts"])
    occurrence: dict[int, int] = {}
    counts: dict[str, int] = defaultdict(int)
    for i, (_, _, name) in enumerate(phases):
        occurrence[i] = counts[name]
        counts[name] += 1
    starts = [p[0] for p in phases]

    def phase_of(ts: float) -> tuple[str, int]:
        i = bisect_right(starts, ts) - 1
        while i >= 0:
            if phases[i][0] <= ts <= phases[i][1]:
                return phases[i][2], occurrence[i]
            i -= 1
        return "-", -1

    raw = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    raw.sort(key=lambda e: float(e["ts"]))
    kernels: list[Kernel] = []
    last: dict[str, tuple[str, int]] = {}
    unlinked = 0
    for e in raw:
        args = e.get("args") or {}
        stream = str(args.get("stream", e.get("tid", "")))
        corr = args.get("correlation")
        if corr in launches:
            ph, layer = phase_of(launches[corr])
        else:
            unlinked += 1
            ph, layer = last.get(stream, ("-", -1))
        last[stream] = (ph, layer)
        grid = args.get("grid")
        grid0 = (int(grid[0]) if isinstance(grid, list) and grid and isinstance(grid[0], int | float)
                 and 0 <= grid[0] < 2**31 else 0)  # a NaN, infinite or huge grid reads as unknown
        family = classify(str(e.get("name", ""))) if e.get("cat") == "kernel" else "mem.copy"
        kernels.append(Kernel(str(e.get("name", "")), family, stream, float(e["ts"]) * 1e-6, float(e["dur"]) * 1e-6,
                              ph, layer, grid0))
    if unlinked:
        notes.append(f"{unlinked} kernels had no launching runtime event; they take their stream's previous phase")
    if not kernels:
        return TraceReading([], [], device, num_sms, 0.0, notes + ["no GPU kernels in the trace"], sh)
    window = max(k.start_s + k.seconds for k in kernels) - min(k.start_s for k in kernels)
    comm = sorted((k.start_s, k.start_s + k.seconds) for k in kernels if k.family.startswith("deepep."))
    comm_starts = [c[0] for c in comm]
    held = [k.grid0 for k in kernels if k.family in ("deepep.dispatch", "deepep.combine") and k.grid0]
    held_sms = int(sorted(held)[len(held) // 2]) if held else 0
    samples: list[Sample] = []
    groups: dict[tuple[str, int, str], list[Kernel]] = defaultdict(list)
    for k in kernels:
        groups[(k.phase, k.layer, k.family)].append(k)

    def overlap(k: Kernel) -> float:
        return _intervals_overlap(k.start_s, k.start_s + k.seconds, comm, comm_starts) / k.seconds if k.seconds else 0.0

    mismatched = []
    for (ph, layer, family), ks in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1], g[0][2])):
        slot = slots.get((ph, family))
        if family.startswith("gemm.") and slot is not None and len(slot) == len(ks):
            dtype = "bf16" if family == "gemm.bf16" else "fp8"
            kind = "grouped_gemm" if family == "gemm.grouped_fp8" else "gemm"
            for k, (op, gpass, flops, rows) in zip(ks, slot):
                size = grouped_curve_rows(rows, sh) if kind == "grouped_gemm" else flops
                samples.append(Sample(op, gpass, kind, dtype, size, flops, k.seconds, overlap(k), held_sms, layer,
                                      f"{op}.{gpass}", k.start_s, k.stream))
        elif family.startswith("gemm.") and (ph, family) == ("mlp(W)", "gemm.wgrad_fp8"):
            flops = 2.0 * sh.R * sh.D * 3 * sh.F + 2.0 * sh.T * sh.D * 3 * sh.shared_F
            spans = [(k.start_s, k.start_s + k.seconds) for k in ks]
            wall = _union(spans)
            ov = _intervals_overlap(min(s for s, _ in spans), max(e for _, e in spans), comm, comm_starts)
            samples.append(Sample(ops.MOE_EXPERT_GEMM, "wgrad", "grouped_gemm", "fp8", grouped_curve_rows(sh.R, sh), flops, wall,
                                  min(1.0, ov / wall) if wall > 0 else 0.0, held_sms, layer,
                                  "moe.expert_gemm+shared.wgrad",
                                  min(s for s, _ in spans), "compute"))
        elif family.startswith("gemm."):
            mismatched.append(f"{ph}/{family}: {len(ks)} kernels" + (f", expected {len(slot)}" if slot else ""))
            for i, k in enumerate(ks):
                samples.append(Sample("misc", ph, "mem", "-", 1.0, 1.0, k.seconds, overlap(k), held_sms, layer,
                                      f"{family}@{ph}#{i}", k.start_s, k.stream))
        elif family in ("attn.fwd", "attn.bwd"):
            causal = 0.5
            fwd_flops = 2.0 * sh.T * sh.S * sh.H * (sh.qk_nope + sh.qk_rope + sh.v_dim) * causal
            flops = fwd_flops * (2.5 if family == "attn.bwd" else 1.0)
            for k in ks:
                samples.append(Sample(ops.ATTN_CORE, "fwd" if family == "attn.fwd" else "bwd", "attn", "bf16",
                                      flops, flops, k.seconds, overlap(k), held_sms, layer,
                                      f"attn.core.{'fwd' if family == 'attn.fwd' else 'bwd'}", k.start_s, k.stream))
        elif family in ("deepep.dispatch", "deepep.combine"):
            # backward annotations run the mirror kernel: combine(B) dispatches gradients (FP8, cast first),
            # dispatch(B) combines them (BF16).
            fp8 = family == "deepep.dispatch"
            per_token = sh.dispatch_bytes_per_token if fp8 else sh.combine_bytes_per_token
            nbytes = sh.T * sh.nodes_per_token * per_token
            label = f"deepep.{family.split('.')[1]}.{'fwd' if ph.endswith('(F)') else 'bwd'}"
            op = ops.MOE_DISPATCH if ph.startswith("dispatch") else ops.MOE_COMBINE
            for k in ks:
                samples.append(Sample(op, "fwd" if ph.endswith("(F)") else "bwd", "comm", "fp8" if fp8 else "bf16",
                                      nbytes, nbytes, k.seconds, 0.0, k.grid0, layer, label, k.start_s, k.stream))
        elif family == "deepep.notify":
            main = [g for g in groups.get((ph, layer, "deepep.dispatch"), []) + groups.get((ph, layer, "deepep.combine"), [])]
            if not main:
                continue
            mfam = main[0].family
            label = f"deepep.{mfam.split('.')[1]}.{'fwd' if ph.endswith('(F)') else 'bwd'}"
            op = ops.A2A_COUNT_EXCHANGE
            secs = sum(k.seconds for k in ks)
            samples.append(Sample(op, ph, "notify", "-", 1.0, 1.0, secs, 0.0, 0, layer, label, ks[0].start_s,
                                  ks[0].stream))
        else:
            # no shapes for memory-bound kernels: the n-th kernel of a family in a phase is one slot
            for i, k in enumerate(ks):
                samples.append(Sample(_MEM_OPS.get(family, "misc"), ph, "mem", "-", 1.0, 1.0, k.seconds, overlap(k),
                                      held_sms, layer, f"{family}@{ph}#{i}", k.start_s, k.stream))
    if mismatched:
        notes.append("GEMM groups whose kernel count did not match the config's slots (kept as measured "
                     "per-op times): " + "; ".join(mismatched[:6]))
    return TraceReading(kernels, samples, device, num_sms, window, notes, sh)


def launch_gaps(kernels: Sequence[Kernel], stream: str, small_s: float = 50e-6) -> dict[str, float]:
    """Idle gaps between consecutive kernels of ``stream``: the median small gap (launch-bound, under
    ``small_s``) and the count and total of the larger ones (host stalls, waits on other streams)."""
    ks = sorted((k for k in kernels if k.stream == stream), key=lambda k: k.start_s)
    gaps = [b.start_s - (a.start_s + a.seconds) for a, b in zip(ks, ks[1:])]
    small = sorted(g for g in gaps if 0 <= g < small_s)
    large = [g for g in gaps if g >= small_s]
    return {"launch_gap_s": small[len(small) // 2] if small else 0.0, "small_gaps": float(len(small)),
            "large_gaps": float(len(large)), "large_gap_total_s": sum(large),
            "busy_s": sum(k.seconds for k in ks)}
