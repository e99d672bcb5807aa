"""Fuzz every file surface of ``moesim`` through its real CLI: 0 tracebacks, 0 hangs, 0 wrong exit codes,
0 partial outputs.

    python benchmarks/fuzz_files.py --inputs 2000 --seed 0 [--timeout-s 60] [--subprocess-fraction 0.05] [--json]

Surfaces (each a file a user hands to a command) and the commands that read them:

- ``calibration``: ``moesim calibrate show F``, ``moesim predict --calibration F`` (also a version-1 CostModel file);
- ``stack``: ``moesim predict --stack F`` (single plan or the seed scenario);
- ``measured-runs``: ``moesim validate F`` (``--json``, ``--write-intervals OUT``);
- ``capacity-spec``: ``moesim study capacity --spec F --out DIR --workers 1``;
- ``trace``: ``moesim calibrate fit F --out OUT`` and ``moesim calibrate compare F`` (DeepSeek-style job traces
  as ``.json.gz`` and moesim op-event traces as ``.json``, both synthetic and small);
- ``scenario``: ``moesim predict --scenario F`` (``--trace OUT``);
- ``cluster``: ``moesim predict --cluster F``;
- ``hf-config``: ``moesim show DIR/config.json`` and ``moesim predict --model DIR/config.json``;
- ``model``: a model TOML, ``moesim show F`` and ``moesim predict --model F``;
- ``plan``: a parallel-plan TOML, ``moesim show deepseek-v3-671b --plan F``;
- ``routing``: a tokens-per-expert file (``.json`` list or whitespace-separated text),
  ``moesim predict --routing F``;
- ``torchtitan-job``: a TorchTitan job TOML, ``moesim predict --from-torchtitan F``;
- ``megatron-recipe``: a Megatron-Bridge recipe (written as JSON, which YAML reads), ``moesim predict
  --from-megatron F``.

About 7% of the inputs (``--special-fraction``) replace the file by a special one: a symlink to
``/dev/zero``, a named pipe (FIFO) with no writer, a directory, a sparse file one byte over its size limit
(:data:`sim.limits.MAX_INPUT_MB`, or :data:`sim.limits.MAX_TRACE_MB` for a plain trace), and for traces a
gzip bomb (1 GB of zeros in about 1 MB) and a two-step trace (two ``ProfilerStep#N`` windows). Each must be
refused (exit 2, one line) or read, never hang or fill memory. The peak resident memory of the fuzzing
process (an upper bound of every in-process input) and of any subprocess input is reported (the latter
counts the pages a forked child shares with the fuzzer before ``exec``, so it too is an upper bound).

Every input starts from a valid file (the project's shipped files where it ships one, else a small
synthetic file built here) and is mutated with a seeded mix of structural mutations (dropped keys, wrong
types, zero/negative/NaN/inf/huge numbers, unknown keys, deep nesting, wrong top-level type, emptied
containers, swapped values, huge strings) and byte mutations (truncation, invalid UTF-8, an empty file,
random bytes, bit flips, deep nesting as text, a BOM or NUL byte; corrupt or truncated gzip for traces).
About 8% of the inputs stay valid.

Each input runs in this process through :func:`moesim.cli.main` (with ``MOESIM_DEBUG=1``, so that a bug shows
its traceback; a SIGALRM timer catches hangs), and a seeded ``--subprocess-fraction`` of them as real
``python -m moesim`` processes with a timeout (exit codes and stderr as a user sees them). Verdicts:

- exit 0: accepted; its outputs must be complete (stdout JSON parses strictly, with no NaN/Infinity; every
  output file exists and parses; a capacity table holds every point);
- exit 2 with exactly one stderr line holding ``error:``, no ``Traceback``, nothing on stdout and none of
  the command's output files (or output folder) left behind: rejected (a user error);
- anything else (a traceback, another exit code, a hang past ``--timeout-s``, a partial output, a
  temporary file left behind): a failure.

Prints a per-surface table (inputs, accepted, rejected, failures, subprocess runs), the totals and the wall
time, then every failure with its input and command; exits 1 if there is any failure.
``--keep-failures DIR`` copies each failing input there.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gzip
import io
import json
import math
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

__all__ = ["SURFACES", "Summary", "InputResult", "fuzz", "main", "make_input", "key_dictionary", "deepseek_style_trace"]

SURFACES = ("calibration", "stack", "measured-runs", "capacity-spec", "trace", "scenario", "cluster", "hf-config",
            "model", "plan", "routing", "torchtitan-job", "megatron-recipe")
SPECIALS = ("dev_zero", "fifo", "directory", "oversized")
TRACE_SPECIALS = ("gzip_bomb", "two_step")

# ----------------------------------------------------------------------------------------------------------
# Valid seed files
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    """A valid file a surface's inputs start from: its parsed content, format and file name."""

    label: str
    filename: str
    data: Any
    fmt: str  # "json" | "toml"
    gz: bool = False


SMALL_HF_DEEPSEEK = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 256,
                     "num_attention_heads": 4, "vocab_size": 1024, "n_routed_experts": 8, "num_experts_per_tok": 2,
                     "moe_intermediate_size": 64, "first_k_dense_replace": 1, "intermediate_size": 512,
                     "q_lora_rank": None, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
                     "v_head_dim": 32, "n_group": 1, "topk_group": 1, "n_shared_experts": 1,
                     "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "norm_topk_prob": True,
                     "num_nextn_predict_layers": 1, "tie_word_embeddings": False}
DEEPSEEK_V3_HF = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
                  "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
                  "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
                  "n_routed_experts": 256, "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536,
                  "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc",
                  "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8, "moe_layer_freq": 1,
                  "first_k_dense_replace": 3, "norm_topk_prob": True, "scoring_func": "sigmoid",
                  "num_nextn_predict_layers": 1, "vocab_size": 129280, "max_position_embeddings": 163840,
                  "rope_theta": 10000, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
QWEN3_MOE_HF = {"model_type": "qwen3_moe", "hidden_size": 4096, "num_hidden_layers": 94, "num_attention_heads": 64,
                "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
                "moe_intermediate_size": 1536, "vocab_size": 151936, "norm_topk_prob": True,
                "tie_word_embeddings": False, "decoder_sparse_step": 1}
MIXTRAL_HF = {"model_type": "mixtral", "hidden_size": 6144, "num_hidden_layers": 56, "num_attention_heads": 48,
              "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
              "intermediate_size": 16384, "vocab_size": 32768, "tie_word_embeddings": False}

SMALL_SCENARIO = {"scenario": {"name": "fuzz", "description": "debug model on 8 B200", "model": "debug",
                               "cluster": "hgx-b200", "gpus": 8, "stack": "torchtitan"},
                  "base": {"ep": 8, "seq_len": 1024, "global_batch": 64, "ac": "full"},
                  "variant": [{"name": "nccl", "fitted": False, "measured_tokens_per_s_per_gpu": 1000.0,
                               "source": "fuzz"},
                              {"name": "deepep", "plan": {"ep_backend": "deepep", "precision": "mxfp8"}}]}

SMALL_RUNS = {"run": [
    {"id": "a", "model": "debug", "gpu": "b200", "gpus": 8, "cluster": "hgx-b200", "stack": "torchtitan",
     "release": "fuzz", "measured_tokens_per_s_per_gpu": 1000, "source": "fuzz", "fitted": True,
     "plan": {"ep": 8, "seq_len": 1024, "global_batch": 64}},
    {"id": "b", "model": "debug", "gpu": "b200", "gpus": 8, "cluster": "hgx-b200", "stack": "torchtitan",
     "release": "fuzz", "measured_tokens_per_s_per_gpu": 1200.5, "measured_tflops_per_gpu": 10.0,
     "source": "fuzz", "baseline": "a", "notes": "n", "plan": {"ep": 8, "seq_len": 1024, "ep_backend": "deepep"}},
    {"id": "c", "model": "debug", "gpu": "h100", "gpus": 16, "cluster": "hgx-h100", "stack": "megatron",
     "release": "megatron-bridge 26.04.01", "measured_tokens_per_s_per_gpu": 800, "source": "fuzz",
     "plan": {"ep": 8, "seq_len": 1024, "pp": 2}},
]}

SMALL_SPECS = [
    {"capacity": {"tokens": 1e9, "price_per_gpu_hour": {"b200": 6.0}},
     "search": {"tp": [1], "pp": [1], "schedules": ["1f1b"], "vpp": [2], "ep": [8], "ac": ["full"],
                "micro_batch": [1]},
     "sweep": [{"models": ["debug"], "gpus": ["b200"], "gpu_counts": [8], "precisions": ["bf16"],
                "ep_backends": ["nccl"], "seq_len": 1024, "global_batch": 64}]},
    {"capacity": {"tokens": 2e9, "price_per_gpu_hour": 4.5},
     "search": {"tp": [1, 2], "pp": [1, 2], "schedules": ["1f1b", "interleaved-1f1b"], "vpp": [2], "ep": [4, 8],
                "ac": ["selective", "full"], "micro_batch": [1]},
     "sweep": [{"models": ["debug"], "gpus": ["b200", "h100"], "gpu_counts": [8, 16], "nic_gbps": [400],
                "nvlink_domain": ["template"], "oversubscription": [1.0], "precisions": ["bf16"],
                "ep_backends": ["deepep"], "stacks": ["torchtitan"], "seq_len": 1024, "global_batch": 64},
               {"models": ["debug"], "gpus": ["gb200"], "gpu_counts": [8], "nvlink_domain": ["nvl72"],
                "precisions": ["mxfp8"], "seq_len": 2048, "global_batch": 32}]},
]

SMALL_STACK = {"stack": {"base": "megatron", "name": "fuzz-stack", "kernel_overhead_s": 5e-6, "deepep_sms": 24},
               "efficiency": {"sm100": {"grouped_gemm": 0.7, "default": 0.5}},
               "sources": {"name": "fuzz seed"}}

SMALL_PLAN = {"tp": 1, "pp": 2, "ep": 8, "seq_len": 1024, "micro_batch": 1, "global_batch": 64, "ac": "full",
              "pp_schedule": "1f1b"}

FLAT_CLUSTER = {"gpu": "b200", "n_gpus": 16, "gpus_per_node": 8, "nvlink_domain_gpus": 8, "nics_per_gpu": 1,
                "nic_gbps": 400, "nvlink_latency_us": 1.0,
                "fabric": {"kind": "rail-optimized", "tiers": 2, "nodes_per_leaf": 32, "hop_latency_us": 1.0}}

# Kernel names of a DeepSeek-style job trace (each matches one rule of calibrate.rules.RULES).
_K_FP8 = "void cutlass::device_kernel<dpsk::gemm::fp8_ptp128c::GemmKernel<128, 128>>(Params)"
_K_GROUPED = "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel>(Params)"
_K_WGRAD = "void cutlass::device_kernel<dpsk::gemm::fp8_dptp128c_acc::GemmKernel>(Params)"
_K_BF16 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
_K_ATTN_F = "void flash::compute_attn_ws<Flash_fwd_kernel_traits<192, 128>>(Flash_fwd_params)"
_K_ATTN_B = "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<192, 128>>(Params)"
_K_NORM = "void rms_norm_kernel<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16 const*, float, int)"
_K_CAST = "void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128>(__nv_bfloat16 const*)"
_K_SWIGLU = "void swiglu_forward_kernel<__nv_bfloat16>(__nv_bfloat16*, int)"
_K_DISPATCH = "void dpsk::ep::internode::dispatch<false, 8, false, 8>(int4*, float*, int*)"
_K_COMBINE = "void dpsk::ep::internode::combine<__nv_bfloat16, 8>(int4*, float*, int*)"
_K_NOTIFY = "void dpsk::ep::internode::notify_dispatch<8>(int const*, int*, int)"


def deepseek_style_trace(layers: int = 2, seed: int = 0) -> dict[str, Any]:
    """A small synthetic Kineto trace in the style of DeepSeek's H800 training trace: per layer the phase
    annotations ``attn(F) dispatch(F) mlp(F) combine(F) combine(B) mlp(B) dispatch(B) attn(B) mlp(W) attn(W)``,
    runtime launches linked to their kernels by ``correlation``, and kernels named as DeepSeek's are (FP8 and
    grouped GEMMs with the slot counts of :data:`calibrate.rules.DSV3_SLOTS`, FlashAttention, DeepEP), with
    durations from the slots' FLOPs at a fixed efficiency (so the fit is well conditioned)."""
    from calibrate.rules import DSV3_SLOTS, RunShapes

    rng = random.Random(seed)
    sh = RunShapes()
    fp8_peak, bf16_peak = 1979e12, 989e12
    attn_flops = 2.0 * sh.T * sh.S * sh.H * (sh.qk_nope + sh.qk_rope + sh.v_dim) * 0.5

    def gemm_us(phase: str, family: str, index: int, peak: float, eff: float) -> float:
        flops = DSV3_SLOTS[(phase, family)][index][2]
        return flops / (peak * eff) * 1e6 * rng.uniform(0.97, 1.03)

    def phase_kernels(phase: str) -> list[tuple[str, int, float, int]]:
        """(kernel name, stream, duration in us, grid[0]) in launch order."""
        compute, comm = 7, 20
        out: list[tuple[str, int, float, int]] = []
        if phase == "attn(F)":
            out.append((_K_NORM, compute, 12.0, 132))
            out += [(_K_FP8, compute, gemm_us(phase, "gemm.fp8", i, fp8_peak, 0.55), 132) for i in range(5)]
            out.append((_K_ATTN_F, compute, attn_flops / (bf16_peak * 0.5) * 1e6, 132))
            out.append((_K_BF16, compute, gemm_us(phase, "gemm.bf16", 0, bf16_peak, 0.3), 132))
            out.append((_K_CAST, compute, 20.0, 132))
        elif phase in ("dispatch(F)", "combine(B)"):
            out.append((_K_NOTIFY, comm, 15.0, 20))
            out.append((_K_DISPATCH, comm, sh.T * sh.nodes_per_token * sh.dispatch_bytes_per_token / 35e9 * 1e6, 20))
        elif phase in ("combine(F)", "dispatch(B)"):
            out.append((_K_COMBINE, comm, sh.T * sh.nodes_per_token * sh.combine_bytes_per_token / 35e9 * 1e6, 20))
        elif phase == "mlp(F)":
            out += [(_K_FP8, compute, gemm_us(phase, "gemm.fp8", i, fp8_peak, 0.5), 132) for i in range(2)]
            out += [(_K_GROUPED, compute, gemm_us(phase, "gemm.grouped_fp8", i, fp8_peak, 0.6), 132)
                    for i in range(2)]
            out.append((_K_SWIGLU, compute, 25.0, 132))
        elif phase == "mlp(B)":
            out += [(_K_FP8, compute, gemm_us(phase, "gemm.fp8", i, fp8_peak, 0.5), 132) for i in range(2)]
            out += [(_K_GROUPED, compute, gemm_us(phase, "gemm.grouped_fp8", i, fp8_peak, 0.6), 132)
                    for i in range(2)]
        elif phase == "attn(B)":
            out += [(_K_FP8, compute, gemm_us(phase, "gemm.fp8", i, fp8_peak, 0.55), 132) for i in range(7)]
            out.append((_K_ATTN_B, compute, 2.5 * attn_flops / (bf16_peak * 0.45) * 1e6, 132))
            out += [(_K_BF16, compute, gemm_us(phase, "gemm.bf16", i, bf16_peak, 0.3), 132) for i in range(2)]
        elif phase == "mlp(W)":
            out += [(_K_WGRAD, compute, 400.0 * rng.uniform(0.9, 1.1), 132) for _ in range(4)]
        elif phase == "attn(W)":
            out += [(_K_WGRAD, compute, 60.0 * rng.uniform(0.9, 1.1), 132) for _ in range(5)]
        return out

    phases = ("attn(F)", "dispatch(F)", "mlp(F)", "combine(F)", "combine(B)", "mlp(B)", "dispatch(B)", "attn(B)",
              "mlp(W)", "attn(W)")
    base = 1_740_000_000_000_000
    host_t, dev_t, corr = float(base), float(base + 50), 1000
    events: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "ts": base, "pid": 1, "tid": 0,
                                     "args": {"name": "python3"}}]
    for _layer in range(layers):
        for phase in phases:
            kernels = phase_kernels(phase)
            start = host_t
            for name, stream, dur, grid0 in kernels:
                corr += 1
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                               "ts": round(host_t, 3), "dur": 4, "args": {"External id": corr, "cbid": 211,
                                                                          "correlation": corr}})
                dev_t = max(dev_t, host_t + 6.0)
                events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream,
                               "ts": round(dev_t, 3), "dur": round(dur, 3),
                               "args": {"External id": corr, "device": 0, "stream": stream, "correlation": corr,
                                        "grid": [grid0, 1, 1], "block": [128, 1, 1]}})
                dev_t += dur + rng.uniform(2.0, 6.0)
                host_t += 8.0
            events.append({"ph": "X", "cat": "user_annotation", "name": phase, "pid": 1, "tid": 1,
                           "ts": round(start - 1.0, 3), "dur": round(host_t - start + 2.0, 3),
                           "args": {"External id": corr}})
            host_t += 5.0
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H800", "totalGlobalMem": 84943110144,
                                  "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
            "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 64},
            "traceEvents": events, "traceName": "synthetic DeepSeek-style trace (benchmarks/fuzz_files.py)"}


def _moesim_op_trace() -> dict[str, Any]:
    from calibrate.synthetic import synthetic_trace

    return {"traceEvents": synthetic_trace(seed=0, repeats=2),
            "deviceProperties": [{"name": "NVIDIA H100 80GB HBM3"}]}


def _read_toml(rel: str) -> Any:
    with open(ROOT / rel, "rb") as handle:
        return tomllib.load(handle)


def _read_yaml(rel: str) -> Any:
    import yaml

    return yaml.safe_load((ROOT / rel).read_text(encoding="utf-8"))


def _read_json(rel: str) -> Any:
    return json.loads((ROOT / rel).read_text(encoding="utf-8"))


def build_seeds() -> dict[str, list[Seed]]:
    """The valid files each surface's inputs start from."""
    from sim.catalog import load_gpu
    from sim.costs import default_costs

    clusters = _read_toml("sim/catalog/clusters.toml")
    models = _read_toml("sim/catalog/models.toml")
    seeds: dict[str, list[Seed]] = {
        "calibration": [Seed(name, f"{name}.json", _read_json(f"sim/calibrations/{name}.json"), "json")
                        for name in ("b200-published", "h100-published", "gb200-published", "h800-deepseek-trace")]
        + [Seed("costmodel-v1", "costmodel-v1.json", json.loads(default_costs(load_gpu("b200")).to_json()), "json")],
        "stack": [Seed(name, f"{name}.toml", _read_toml(f"sim/stack_profiles/{name}.toml"), "toml")
                  for name in ("torchtitan", "megatron-26.04", "megatron-26.02", "deepseek")]
        + [Seed("user-stack", "user-stack.toml", SMALL_STACK, "toml")],
        "measured-runs": [Seed("shipped", "measured_runs.toml", _read_toml("studies/data/measured_runs.toml"), "toml"),
                          Seed("small", "runs.toml", SMALL_RUNS, "toml")],
        "capacity-spec": [Seed(f"spec{i}", "spec.toml", s, "toml") for i, s in enumerate(SMALL_SPECS)],
        "trace": [Seed("deepseek-style", "job-trace.json.gz", deepseek_style_trace(), "json", gz=True),
                  Seed("moesim-ops", "ops-trace.json", _moesim_op_trace(), "json")],
        "scenario": [Seed("dsv3-671b-b200", "dsv3-671b-b200.toml", _read_toml("sim/scenarios/dsv3-671b-b200.toml"), "toml"),
                     Seed("small", "small-scenario.toml", SMALL_SCENARIO, "toml")],
        "cluster": [Seed(name, f"{name}.toml", {name: clusters[name]}, "toml")
                    for name in ("hgx-b200", "hgx-h100", "h800-deepseek", "gb200-nvl72") if name in clusters]
        + [Seed("flat", "my-cluster.toml", FLAT_CLUSTER, "toml")],
        "model": [Seed(name, f"{name}.toml", {name: models[name]}, "toml") for name in ("debug", "deepseek-v3-16b")]
        + [Seed("flat-model", "flat-model.toml", {k: v for k, v in models["debug"].items() if k != "source"}, "toml")],
        "plan": [Seed("dsv3-671b-b200", "plan.toml", _read_toml("examples/plan-dsv3-671b-b200.toml"), "toml"),
                 Seed("flat-plan", "flat-plan.toml", SMALL_PLAN, "toml")],
        "routing": [Seed("json-list", "load.json", [1.0, 2.0, 3.0, 4.0, 4.0, 3.0, 2.0, 1.0], "json"),
                    Seed("text", "load.txt", [5, 1, 1, 1, 1, 1, 1, 1], "text")],
        "torchtitan-job": [Seed("torchtitan-dsv3-671b", "job.toml", _read_toml("examples/torchtitan-dsv3-671b.toml"),
                                "toml")],
        "megatron-recipe": [Seed("megatron-dsv3-gb200", "recipe.yaml", _read_yaml("examples/megatron-dsv3-gb200.yaml"),
                                 "json")],
        "hf-config": [Seed("small-deepseek", "config.json", SMALL_HF_DEEPSEEK, "json"),
                      Seed("deepseek-v3", "config.json", DEEPSEEK_V3_HF, "json"),
                      Seed("qwen3-moe", "config.json", QWEN3_MOE_HF, "json"),
                      Seed("mixtral", "config.json", MIXTRAL_HF, "json")],
    }
    return seeds


# ----------------------------------------------------------------------------------------------------------
# Serialisers (TOML has no writer in the standard library; deep nesting is written as text)
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deep:
    """A value nested ``depth`` levels deep, written directly as text (no recursion in the serialisers)."""

    depth: int
    kind: str  # "list" | "dict"


@dataclass(frozen=True)
class Raw:
    """A number literal written verbatim: one that overflows when read (``1e400`` is ``inf`` to Python's
    readers, a 5000-digit integer exceeds its int-conversion limit)."""

    text: str


RAW_NUMBERS = (Raw("1e400"), Raw("-1e400"), Raw("1e-400"), Raw("1" + "0" * 400), Raw("9" * 5000))

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(key: Any) -> str:
    text = str(key)
    return text if _BARE.fullmatch(text) else json.dumps(text, ensure_ascii=False)


def _toml_inline(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Deep):
        if value.kind == "list":
            return "[" * value.depth + "]" * value.depth
        return "{a = " * value.depth + "0" + "}" * value.depth
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_inline(v)}" for k, v in value.items() if v is not None) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_inline(v) for v in value if v is not None) + "]"
    return json.dumps(str(value))


def _is_aot(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def toml_dumps(data: dict[str, Any]) -> str:
    """TOML text of ``data`` (``None`` values are left out: TOML has no null)."""
    lines: list[str] = []

    def emit(table: dict[str, Any], path: list[str], aot: bool) -> None:
        if path:
            header = ".".join(_toml_key(p) for p in path)
            lines.append(f"[[{header}]]" if aot else f"[{header}]")
        for k, v in table.items():
            if v is not None and not isinstance(v, dict) and not _is_aot(v):
                lines.append(f"{_toml_key(k)} = {_toml_inline(v)}")
        for k, v in table.items():
            if isinstance(v, dict):
                emit(v, [*path, str(k)], False)
            elif _is_aot(v):
                for item in v:
                    emit(item, [*path, str(k)], True)

    emit(data, [], False)
    return "\n".join(lines) + "\n"


def json_dumps(data: Any) -> str:
    """JSON text of ``data``; NaN and infinities as Python writes them (``NaN``, ``Infinity``), which a
    strict reader must refuse."""
    deep: list[Deep | Raw] = []

    def swap(value: Any) -> Any:
        if isinstance(value, Deep | Raw):
            deep.append(value)
            return f"\x01DEEP{len(deep) - 1}\x01"
        if isinstance(value, dict):
            return {str(k): swap(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [swap(v) for v in value]
        if isinstance(value, datetime.datetime | datetime.date | datetime.time):
            return value.isoformat()
        return value

    text = json.dumps(swap(data), allow_nan=True, ensure_ascii=False)
    for i, d in enumerate(deep):
        if isinstance(d, Raw):
            body = d.text
        else:
            body = "[" * d.depth + "]" * d.depth if d.kind == "list" else '{"a":' * d.depth + "0" + "}" * d.depth
        text = text.replace(json.dumps(f"\x01DEEP{i}\x01"), body)
    return text


def serialise(seed: Seed, data: Any) -> bytes:
    if seed.fmt == "text":  # whitespace-separated numbers; anything else as JSON text (to be refused)
        if isinstance(data, list) and all(not isinstance(x, list | dict) for x in data):
            return (" ".join(str(x) for x in data) + "\n").encode("utf-8", "surrogatepass")
        return json_dumps(data).encode("utf-8", "surrogatepass")
    if seed.fmt == "toml":
        if not isinstance(data, dict):
            data = {"value": data}
        return toml_dumps(data).encode("utf-8")
    return json_dumps(data).encode("utf-8")


# ----------------------------------------------------------------------------------------------------------
# Mutations
# ----------------------------------------------------------------------------------------------------------

NASTY_NUMBERS: tuple[Any, ...] = (0, -1, -0.0, 0.0, 1, 2, 3, 7, 4096, 4097, 65536, 1 << 20, 2**31, 2**53 + 1, 2**63,
                                  2**64, 10**30, -(10**30), 1e308, -1e308, 1e-300, 5e-324, 1e-9, 1e-6, 0.5, 0.999,
                                  1.0, 1.5, 2.0, 1e6, 1e9, 1e12, 1e15, 1e18, math.nan, math.inf, -math.inf)
NASTY_STRINGS = ("", " ", "nan", "inf", "8", "-1", "debug", "b200", "x" * 300, "\u00e9\u4e2d\U0001f600",
                 "../../etc/passwd", "/dev/null", "/dev/zero", "a\nb", "\t", "None", "true", "${HOME}", "%s%n", "\\")
ODD_KEYS = ("zz_unknown", "", " ", "Name", "name ", "0", "__proto__", "\u00e9", "a.b", "[x]", "n_layers", "gpu")


def _nasty_value(rng: random.Random, fmt: str) -> Any:
    kind = rng.randrange(9)
    if kind <= 2:
        return rng.choice(NASTY_NUMBERS)
    if kind == 3:
        return rng.choice(NASTY_STRINGS)
    if kind == 4:
        return rng.choice([True, False])
    if kind == 5:
        return rng.choice([[], [1, "a"], [math.nan], [[]], [{}], list(range(rng.randrange(1, 6)))])
    if kind == 6:
        return rng.choice([{}, {"a": 1}, {"": None if fmt == "json" else 0}, {"x": [1, 2]}])
    if kind == 7 and fmt == "toml":
        return rng.choice([datetime.datetime(1979, 5, 27, 7, 32, tzinfo=datetime.UTC), datetime.date(1979, 5, 27),
                           datetime.time(7, 32)])
    return None if fmt == "json" else rng.choice(NASTY_NUMBERS)


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def _walk(data: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    stack: list[tuple[tuple[Any, ...], Any]] = [(path, data)]
    while stack:
        p, node = stack.pop()
        yield p, node
        if isinstance(node, dict):
            stack.extend(((*p, k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend(((*p, i), v) for i, v in enumerate(node))


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


def _set(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    _get(data, path[:-1])[path[-1]] = value
    return data


def _pick(rng: random.Random, paths: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
    """A path: 35% of the time a shallow one (depth <= 2, the file's own keys); 40% of the time by key
    name first (each distinct key equally likely, so that a rare field such as an event's ``correlation``
    is hit as often as the common ones); else any path."""
    roll = rng.random()
    shallow = [p for p in paths if len(p) <= 2]
    if shallow and roll < 0.35:
        return rng.choice(shallow)
    if roll < 0.75:
        by_key: dict[str, list[tuple[Any, ...]]] = {}
        for p in paths:
            by_key.setdefault(str(p[-1]) if p and isinstance(p[-1], str) else "[index]", []).append(p)
        if by_key:
            return rng.choice(by_key[rng.choice(sorted(by_key))])
    return rng.choice(list(paths))


#: How often each structural mutation is drawn.
_STRUCTURAL_WEIGHTS = {"drop_key": 2.0, "wrong_type": 2.0, "bad_number": 3.0, "scale_number": 3.0, "unknown_key": 1.0,
                       "deep_nesting": 0.5, "wrong_top": 0.5, "empty_container": 1.0, "swap_values": 1.0,
                       "list_edit": 1.5, "huge_string": 0.5, "rename_key": 1.0}


def key_dictionary(seeds: dict[str, list[Seed]]) -> tuple[str, ...]:
    """Field names a file could plausibly hold in the wrong place: every key of every seed file and every
    field of the specs, the network model and the stack profile (so that an added key is sometimes a real
    field of another table, which only a reader that checks where a field belongs rejects)."""
    import dataclasses

    from sim.comm import CommCosts
    from sim.specs import ClusterSpec, FabricSpec, GPUSpec, ModelSpec, ParallelPlan
    from sim.stacks import StackProfile

    names = {f.name for cls in (CommCosts, ClusterSpec, FabricSpec, GPUSpec, ModelSpec, ParallelPlan, StackProfile)
             for f in dataclasses.fields(cls)}
    for group in seeds.values():
        for seed in group:
            names.update(str(p[-1]) for p, _ in _walk(seed.data) if p and isinstance(p[-1], str))
    return tuple(sorted(names))


def _structural(rng: random.Random, data: Any, fmt: str, keys: Sequence[str] = ()) -> tuple[Any, str]:
    """One structural mutation of ``data`` (in place where possible); returns (data, description)."""
    nodes = list(_walk(data))
    paths = [p for p, _ in nodes if p]
    value: Any
    op = rng.choices(list(_STRUCTURAL_WEIGHTS), weights=list(_STRUCTURAL_WEIGHTS.values()))[0]
    if op == "drop_key":
        keyed = [p for p in paths if isinstance(_get(data, p[:-1]), dict)]
        if keyed:
            p = _pick(rng, keyed)
            del _get(data, p[:-1])[p[-1]]
            return data, f"drop_key {list(p)}"
        op = "wrong_type"
    if op == "wrong_type" and paths:
        p = _pick(rng, paths)
        old = _get(data, p)
        value = _nasty_value(rng, fmt)
        for _ in range(8):
            if _type_name(value) != _type_name(old):
                break
            value = _nasty_value(rng, fmt)
        return _set(data, p, value), f"wrong_type {list(p)} = {value!r:.40}"
    if op == "bad_number":
        numeric = [p for p, v in nodes if p and isinstance(v, int | float) and not isinstance(v, bool)]
        p = _pick(rng, numeric or paths or [()])
        value = rng.choice(RAW_NUMBERS) if rng.random() < 0.12 else rng.choice(NASTY_NUMBERS)
        return _set(data, p, value), f"bad_number {list(p)} = {value!r:.60}"
    if op == "scale_number":
        numeric = [p for p, v in nodes if p and isinstance(v, int | float) and not isinstance(v, bool)]
        if numeric:
            p = _pick(rng, numeric)
            old = _get(data, p)
            how = rng.randrange(6)
            if how == 0 and isinstance(old, int):
                value = old + rng.choice([-1, 1])
            elif how == 1:
                value = float(old)  # an integer written as a float (8.0), or a float kept
            elif how == 2 and isinstance(old, float) and old.is_integer():
                value = int(old)
            else:
                value = old * rng.choice([0, -1, 1e-9, 1e-3, 0.5, 2, 1000, 1e9, 1e18])
            return _set(data, p, value), f"scale_number {list(p)}: {old!r} -> {value!r}"
        op = "unknown_key"
    if op == "unknown_key":
        tables = [p for p, v in nodes if isinstance(v, dict)]
        if tables:
            p = _pick(rng, tables)
            key = rng.choice(keys) if keys and rng.random() < 0.6 else rng.choice(ODD_KEYS)
            if key in _get(data, p):
                key = f"{key}_fuzz"
            _get(data, p)[key] = _nasty_value(rng, fmt)
            return data, f"unknown_key {list(p)}.{key!r}"
    if op == "deep_nesting":
        p = _pick(rng, paths or [()])
        deep = Deep(rng.choice([10, 63, 65, 66, 200, 5000, 100_000]), rng.choice(["list", "dict"]))
        return _set(data, p, deep), f"deep_nesting {list(p)} depth {deep.depth} {deep.kind}"
    if op == "wrong_top":
        choice = rng.randrange(5)
        if fmt == "json":
            top = [[data], 42, "text", None, []][choice]
            return top, f"wrong_top {type(top).__name__}"
        if choice <= 1 and isinstance(data, dict) and data:
            key = rng.choice(list(data))
            return {key: data[key]} if choice else {"wrapped": data}, f"wrong_top only/wrapped [{key}]"
        return {"value": rng.choice(NASTY_NUMBERS)}, "wrong_top scalar table"
    if op == "empty_container":
        containers = [p for p, v in nodes if isinstance(v, dict | list)]
        p = _pick(rng, containers or [()])
        value = {} if isinstance(_get(data, p), dict) else []
        return _set(data, p, value), f"empty_container {list(p)}"
    if op == "swap_values" and len(paths) >= 2:
        leaves = [p for p, v in nodes if p and not isinstance(v, dict | list)]
        if len(leaves) >= 2:
            a, b = rng.sample(leaves, 2)
            va, vb = _get(data, a), _get(data, b)
            if not (a[:len(b)] == b or b[:len(a)] == a):
                _set(data, a, copy.deepcopy(vb))
                _set(data, b, copy.deepcopy(va))
                return data, f"swap_values {list(a)} <-> {list(b)}"
    if op == "list_edit":
        lists = [p for p, v in nodes if isinstance(v, list) and v]
        if lists:
            p = _pick(rng, lists)
            items = _get(data, p)
            how = rng.randrange(4)
            if how == 0:
                items.append(copy.deepcopy(rng.choice(items)))
                return data, f"list_edit {list(p)} duplicate element"
            if how == 1:
                items.append(_nasty_value(rng, fmt))
                return data, f"list_edit {list(p)} append nasty"
            if how == 2:
                del items[rng.randrange(len(items))]
                return data, f"list_edit {list(p)} remove element"
            items.reverse()
            return data, f"list_edit {list(p)} reverse"
    if op == "huge_string":
        strings = [p for p, v in nodes if p and isinstance(v, str)]
        p = _pick(rng, strings or paths or [()])
        value = rng.choice(["x" * 200_000, "\u00e9" * 50_000, "\x00" * 100])
        return _set(data, p, value), f"huge_string {list(p)} ({len(value)} chars)"
    if op == "rename_key":
        keyed = [p for p in paths if isinstance(_get(data, p[:-1]), dict) and isinstance(p[-1], str)]
        if keyed:
            p = _pick(rng, keyed)
            parent = _get(data, p[:-1])
            new = rng.choice([p[-1].upper(), p[-1] + " ", p[-1].replace("_", "-"), "_" + p[-1]])
            if new not in parent:
                parent[new] = parent.pop(p[-1])
                return data, f"rename_key {list(p)} -> {new!r}"
    p = _pick(rng, paths or [()])
    value = rng.choice(NASTY_NUMBERS)
    return _set(data, p, value), f"bad_number {list(p)} = {value!r}"


_BAD_UTF8 = (b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xc0\xaf")


def _bytes_mutation(rng: random.Random, blob: bytes, fmt: str) -> tuple[bytes, str]:
    op = rng.choice(["truncate", "truncate", "invalid_utf8", "invalid_utf8", "empty", "random_bytes", "bitflip",
                     "bitflip", "deep_text", "bom_or_nul", "duplicate_line", "whitespace_only"])
    if op == "truncate" and blob:
        cut = rng.randrange(len(blob))
        return blob[:cut], f"truncate at {cut}/{len(blob)}"
    if op == "invalid_utf8":
        pos = rng.randrange(len(blob) + 1)
        bad = rng.choice(_BAD_UTF8)
        return blob[:pos] + bad + blob[pos:], f"invalid_utf8 {bad!r} at {pos}"
    if op == "random_bytes":
        n = rng.randrange(1, 512)
        return rng.randbytes(n), f"random_bytes {n}"
    if op == "bitflip" and blob:
        out = bytearray(blob)
        for _ in range(rng.randrange(1, 9)):
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
        return bytes(out), "bitflip"
    if op == "deep_text":
        n = rng.choice([65, 1000, 100_000])
        if fmt == "toml":
            return b"a = " + b"[" * n + b"]" * n + b"\n", f"deep_text toml {n}"
        body = (b"[" * n + b"]" * n) if rng.random() < 0.5 else (b'{"a":' * n + b"0" + b"}" * n)
        return body, f"deep_text json {n}"
    if op == "bom_or_nul":
        if rng.random() < 0.5:
            return b"\xef\xbb\xbf" + blob, "utf8_bom"
        pos = rng.randrange(len(blob) + 1)
        return blob[:pos] + b"\x00" + blob[pos:], f"nul at {pos}"
    if op == "duplicate_line":
        lines = blob.split(b"\n")
        if len(lines) > 1:
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            return b"\n".join(lines), f"duplicate_line {i}"
    if op == "whitespace_only":
        return b" \n\t\n", "whitespace_only"
    return b"", "empty"


def _gzip_mutation(rng: random.Random, raw: bytes) -> tuple[bytes, str]:
    blob = gzip.compress(raw, mtime=0)
    op = rng.choice(["truncate_gz", "corrupt_gz", "not_gzip", "empty_gz", "double_gz", "trailing_garbage"])
    if op == "truncate_gz":
        cut = rng.randrange(1, len(blob))
        return blob[:cut], f"truncate_gz at {cut}/{len(blob)}"
    if op == "corrupt_gz":
        out = bytearray(blob)
        i = rng.randrange(10, max(11, len(out) - 8))
        out[i] ^= 0xFF
        return bytes(out), f"corrupt_gz at {i}"
    if op == "not_gzip":
        return raw, "not_gzip (plain JSON in a .gz file)"
    if op == "empty_gz":
        return gzip.compress(b"", mtime=0), "empty_gz"
    if op == "double_gz":
        return gzip.compress(blob, mtime=0), "double_gz"
    return blob + rng.randbytes(16), "trailing_garbage after gzip"


def make_input(rng: random.Random, seed: Seed, keys: Sequence[str] = ()) -> tuple[bytes, str]:
    """A mutated file from ``seed`` (seeded by ``rng``; ``keys``: field names to add, see
    :func:`key_dictionary`): its bytes and what was done to it."""
    roll = rng.random()
    data = copy.deepcopy(seed.data)
    if roll < 0.08:
        raw, what = serialise(seed, data), "valid (unmutated)"
        return (gzip.compress(raw, mtime=0) if seed.gz else raw), what
    if roll < 0.68:
        steps = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            data, what = _structural(rng, data, seed.fmt, keys)
            steps.append(what)
        raw = serialise(seed, data)
        if rng.random() < 0.05:
            raw, what = _bytes_mutation(rng, raw, seed.fmt)
            steps.append(what)
        return (gzip.compress(raw, mtime=0) if seed.gz else raw), "; ".join(steps)
    raw = serialise(seed, data)
    if seed.gz and rng.random() < 0.5:
        return _gzip_mutation(rng, raw)
    blob, what = _bytes_mutation(rng, raw, seed.fmt)
    return (gzip.compress(blob, mtime=0) if seed.gz else blob), what


# ----------------------------------------------------------------------------------------------------------
# Commands and their output checks
# ----------------------------------------------------------------------------------------------------------


class OutputProblem(Exception):
    """An accepted input whose outputs are incomplete or malformed."""


def _strict_json(text: str, what: str) -> Any:
    """Parse an output: complete, strict JSON (no ``NaN``, no ``Infinity``: an interval without evidence is
    ``null``, :func:`sim.uncertainty.prediction_interval`)."""

    def refuse(token: str) -> Any:
        raise OutputProblem(f"{what}: {token} in the output")

    try:
        return json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError as err:
        raise OutputProblem(f"{what}: not valid JSON ({err})") from None


def _json_file(path: Path, key: str | None = None) -> Any:
    if not path.is_file():
        raise OutputProblem(f"{path.name}: missing after exit 0")
    data = _strict_json(path.read_text(encoding="utf-8"), path.name)
    if key is not None and (not isinstance(data, dict) or not data.get(key)):
        raise OutputProblem(f"{path.name}: no {key!r}")
    return data


def _check_predictions(stdout: str, as_json: bool) -> None:
    if not as_json:
        if "tok/s/GPU" not in stdout or "calibration" not in stdout:
            raise OutputProblem("predict: the table or its calibration line is missing")
        return
    doc = _strict_json(stdout, "predict --json")
    preds = doc.get("predictions") if isinstance(doc, dict) else None
    if not preds:
        raise OutputProblem("predict --json: no predictions")
    for p in preds:
        tput, step = p.get("tokens_per_s_per_gpu"), p.get("step_time_s")
        if not (isinstance(tput, int | float) and 0 < tput < math.inf and isinstance(step, int | float)
                and 0 < step < math.inf):
            raise OutputProblem(f"predict --json: prediction {p.get('name')!r}: tokens/s {tput!r}, step {step!r}")


@dataclass
class Invocation:
    """One command line over an input file: what it may write, and how an accepted run is checked."""

    argv: list[str]
    outputs: list[Path] = field(default_factory=list)  # files: none may exist after exit 2
    out_dirs: list[Path] = field(default_factory=list)  # folders: none may exist (or hold a file) after exit 2
    check: Callable[[str], None] = lambda _stdout: None


_SMALL = ["--model", "debug", "--gpus", "8", "--ep", "8", "--seq-len", "1024"]


def _predict(argv: list[str], rng: random.Random, work: Path) -> Invocation:
    as_json = rng.random() < 0.7
    trace = work / "out" / "trace.json" if rng.random() < 0.2 else None
    full = ["predict", *argv, *(["--json"] if as_json else []), *(["--trace", str(trace)] if trace else [])]

    def check(stdout: str) -> None:
        _check_predictions(stdout, as_json)
        if trace is not None:
            _json_file(trace, "traceEvents")

    return Invocation(full, [trace] if trace else [], [], check)


def _cmd_calibration(path: Path, rng: random.Random, work: Path) -> Invocation:
    if rng.random() < 0.45 and path.name != "costmodel-v1.json":
        as_json = rng.random() < 0.5

        def check(stdout: str) -> None:
            if as_json:
                doc = _strict_json(stdout, "calibrate show --json")
                if not isinstance(doc, dict) or doc.get("schema") != "moesim.calibration":
                    raise OutputProblem("calibrate show --json: no schema")
            elif not stdout.startswith("calibration "):
                raise OutputProblem("calibrate show: no header line")

        return Invocation(["calibrate", "show", str(path), *(["--json"] if as_json else [])], check=check)
    gpu = ["--gpu", rng.choice(["b200", "h800", "h100"])] if rng.random() < 0.3 else []
    return _predict([*_SMALL, *gpu, "--calibration", str(path)], rng, work)


def _cmd_stack(path: Path, rng: random.Random, work: Path) -> Invocation:
    if rng.random() < 0.2:
        return _predict(["--scenario", "dsv3-671b-b200", "--stack", str(path)], rng, work)
    return _predict([*_SMALL, "--stack", str(path)], rng, work)


def _cmd_runs(path: Path, rng: random.Random, work: Path) -> Invocation:
    as_json = rng.random() < 0.6
    intervals = work / "out" / "intervals.json" if rng.random() < 0.3 else None
    argv = ["validate", str(path), *(["--json"] if as_json else []),
            *(["--write-intervals", str(intervals)] if intervals else [])]

    def check(stdout: str) -> None:
        if as_json:
            doc = _strict_json(stdout, "validate --json")
            if not isinstance(doc, dict) or not doc.get("rows"):
                raise OutputProblem("validate --json: no rows")
        elif not stdout.strip():
            raise OutputProblem("validate: empty output")
        if intervals is not None:
            _json_file(intervals)

    return Invocation(argv, [intervals] if intervals else [], [], check)


def _cmd_capacity(path: Path, rng: random.Random, work: Path) -> Invocation:
    out = work / "out" / "capacity"
    report = rng.random() < 0.25
    argv = ["study", "capacity", "--spec", str(path), "--out", str(out), "--workers", "1",
            *([] if report else ["--no-report"])]

    def check(stdout: str) -> None:
        table = out / "results.csv"
        if not table.is_file():
            raise OutputProblem("results.csv missing after exit 0")
        text = table.read_text(encoding="utf-8")
        if not text.endswith("\n"):
            raise OutputProblem("results.csv: last line incomplete")
        rows = text.splitlines()[1:]
        m = re.match(r"(\d+) points", stdout)
        if not m or int(m.group(1)) != len(rows) or not rows:
            raise OutputProblem(f"results.csv holds {len(rows)} rows; stdout says {stdout[:60]!r}")
        if report:
            html = out / "capacity-report.html"
            if not html.is_file() or "</html>" not in html.read_text(encoding="utf-8")[-200:]:
                raise OutputProblem("capacity-report.html missing or incomplete")

    return Invocation(argv, [], [out], check)


def _cmd_trace(path: Path, rng: random.Random, work: Path) -> Invocation:
    if rng.random() < (0.9 if path.name == "ops-trace.json" else 0.5):  # compare reads job traces only
        out = work / "out" / "cal.json"
        argv = ["calibrate", "fit", str(path), "--out", str(out)]
        if rng.random() < 0.4:
            argv += ["--gpu", rng.choice(["h800", "h100", "b200"])]
        if rng.random() < 0.2:
            argv += ["--name", "fuzzed"]

        def check_fit(stdout: str) -> None:
            from sim.calibration import load_calibration
            from sim.errors import ConfigError

            if not out.is_file():
                raise OutputProblem("calibration file missing after exit 0")
            try:
                load_calibration(out)
            except ConfigError as err:
                raise OutputProblem(f"the written calibration does not load: {err}") from None
            if not stdout.startswith("calibrate fit: wrote"):
                raise OutputProblem("calibrate fit: no 'wrote' line")

        return Invocation(argv, [out], [], check_fit)
    as_json = rng.random() < 0.6
    sim_trace = work / "out" / "sim.json" if rng.random() < 0.4 else None
    argv = ["calibrate", "compare", str(path), *(["--json"] if as_json else [])]
    if rng.random() < 0.3:
        argv += ["--holdout-layer", rng.choice(["0", "1", "7", "-1"])]
    if rng.random() < 0.3:
        argv += ["--calibration", "h800-deepseek-trace"]
    if sim_trace is not None:
        argv += ["--sim-trace", str(sim_trace)]

    def check_compare(stdout: str) -> None:
        if as_json:
            doc = _strict_json(stdout, "calibrate compare --json")
            if not isinstance(doc, dict) or "trace" not in doc:
                raise OutputProblem("calibrate compare --json: no trace key")
        elif not stdout.startswith("compare "):
            raise OutputProblem("calibrate compare: no header line")
        if sim_trace is not None:
            _json_file(sim_trace, "traceEvents")

    return Invocation(argv, [sim_trace] if sim_trace else [], [], check_compare)


def _cmd_scenario(path: Path, rng: random.Random, work: Path) -> Invocation:
    return _predict(["--scenario", str(path)], rng, work)


def _cmd_cluster(path: Path, rng: random.Random, work: Path) -> Invocation:
    if rng.random() < 0.2:
        return _predict(["--scenario", "dsv3-671b-b200", "--cluster", str(path)], rng, work)
    gpus = rng.choice(["8", "8", "16"])
    return _predict(["--model", "debug", "--gpus", gpus, "--ep", "8", "--seq-len", "1024", "--cluster", str(path)],
                    rng, work)


def _cmd_hf(path: Path, rng: random.Random, work: Path) -> Invocation:
    if rng.random() < 0.5:
        as_json = rng.random() < 0.6

        def check(stdout: str) -> None:
            if as_json:
                doc = _strict_json(stdout, "show --json")
                if not isinstance(doc, dict) or not doc.get("params_total"):
                    raise OutputProblem("show --json: no params_total")
            elif "parameters, total" not in stdout:
                raise OutputProblem("show: no parameter lines")

        return Invocation(["show", str(path), *(["--json"] if as_json else [])], check=check)
    return _predict(["--model", str(path), "--gpus", "8", "--ep", "8", "--seq-len", "1024"], rng, work)


def _cmd_model(path: Path, rng: random.Random, work: Path) -> Invocation:
    if rng.random() < 0.5:
        return _cmd_hf(path, rng, work)  # show F / predict --model F, as for a config.json
    return _predict(["--model", str(path), "--gpus", "8", "--ep", "8", "--seq-len", "1024"], rng, work)


def _cmd_plan(path: Path, rng: random.Random, work: Path) -> Invocation:
    model = "deepseek-v3-671b" if "dsv3" in path.name or path.name == "plan.toml" else "debug"
    as_json = rng.random() < 0.6
    gpus = ["--gpus", rng.choice(["16", "256", "512"])] if rng.random() < 0.3 else []

    def check(stdout: str) -> None:
        if as_json:
            doc = _strict_json(stdout, "show --plan --json")
            if not isinstance(doc, dict) or "memory" not in doc:
                raise OutputProblem("show --plan --json: no memory")
        elif "memory per GPU" not in stdout:
            raise OutputProblem("show --plan: no memory lines")

    return Invocation(["show", model, "--plan", str(path), *gpus, *(["--json"] if as_json else [])], check=check)


def _cmd_routing(path: Path, rng: random.Random, work: Path) -> Invocation:
    return _predict([*_SMALL, "--routing", str(path)], rng, work)


def _cmd_torchtitan(path: Path, rng: random.Random, work: Path) -> Invocation:
    return _predict(["--from-torchtitan", str(path), "--gpu", "b200", "--gpus", "256"], rng, work)


def _cmd_megatron(path: Path, rng: random.Random, work: Path) -> Invocation:
    return _predict(["--from-megatron", str(path), "--gpu", "gb200", "--gpus", "256"], rng, work)


COMMANDS: dict[str, Callable[[Path, random.Random, Path], Invocation]] = {
    "calibration": _cmd_calibration, "stack": _cmd_stack, "measured-runs": _cmd_runs,
    "capacity-spec": _cmd_capacity, "trace": _cmd_trace, "scenario": _cmd_scenario, "cluster": _cmd_cluster,
    "hf-config": _cmd_hf, "model": _cmd_model, "plan": _cmd_plan, "routing": _cmd_routing,
    "torchtitan-job": _cmd_torchtitan, "megatron-recipe": _cmd_megatron,
}

# ----------------------------------------------------------------------------------------------------------
# Special files: devices, pipes, folders, oversized files, a gzip bomb, a two-step trace
# ----------------------------------------------------------------------------------------------------------

BOMB_BYTES = 1 << 30
"""Zeros a gzip bomb inflates to (1 GiB, about 1 MB compressed)."""


def gzip_bomb(inflated: int = BOMB_BYTES) -> bytes:
    """A gzip stream of ``inflated`` zero bytes, compressed in chunks (never held whole)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(1 << 20)
    parts = [packer.compress(chunk) for _ in range(inflated // len(chunk))]
    parts.append(packer.flush())
    return b"".join(parts)


def two_step_trace(seed: int = 0) -> dict[str, Any]:
    """The DeepSeek-style trace twice, as a profiler schedule with ``active=2`` records it: two
    ``ProfilerStep#N`` windows, the second shifted past the first, correlation ids kept unique."""
    one = deepseek_style_trace(seed=seed)
    events = [e for e in one["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    span = end - start + 100.0
    out = [e for e in one["traceEvents"] if e.get("ph") != "X"]
    for step in range(2):
        shift = step * span
        out.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}", "pid": 1, "tid": 1,
                    "ts": round(start - 5.0 + shift, 3), "dur": round(end - start + 10.0, 3), "args": {}})
        for e in events:
            copy_ = copy.deepcopy(e)
            copy_["ts"] = round(e["ts"] + shift, 3)
            args = copy_.get("args")
            if isinstance(args, dict):
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int):
                        args[key] += step * 1_000_000
            out.append(copy_)
    return {**one, "traceEvents": out}


def make_special(rng: random.Random, surface: str, path: Path, cache: dict[str, bytes]) -> str:
    """Replace the input at ``path`` by a special file (see the module docstring); returns what was done."""
    from sim.limits import MAX_INPUT_MB, MAX_TRACE_MB, MB

    kinds = SPECIALS + (TRACE_SPECIALS if surface == "trace" and path.name.endswith(".gz") else ())
    kind = rng.choice(kinds)
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
        (path / "inside.toml").write_text("a = 1\n", encoding="utf-8")
    elif kind == "oversized":
        limit_mb = MAX_TRACE_MB if surface == "trace" and not path.name.endswith(".gz") else MAX_INPUT_MB
        with open(path, "wb") as handle:  # a valid-looking start, then a sparse tail of zeros
            handle.write(b"{" if path.suffix == ".json" else b"# oversized\n")
            handle.truncate(limit_mb * MB + 1)
        kind = f"oversized ({limit_mb} MB + 1 byte)"
    elif kind == "gzip_bomb":
        if "bomb" not in cache:
            cache["bomb"] = gzip_bomb()
        path.write_bytes(cache["bomb"])
        kind = f"gzip_bomb ({len(cache['bomb'])} bytes -> {BOMB_BYTES} bytes)"
    else:
        if "two_step" not in cache:
            cache["two_step"] = gzip.compress(json.dumps(two_step_trace()).encode("utf-8"), mtime=0)
        path.write_bytes(cache["two_step"])
    return f"special: {kind}"

# ----------------------------------------------------------------------------------------------------------
# Running one input
# ----------------------------------------------------------------------------------------------------------


class _Timeout(BaseException):
    """Raised by SIGALRM in an in-process run that outlives its timeout (not an Exception: nothing catches it)."""


def _alarm(_signum: int, _frame: Any) -> None:
    raise _Timeout


@dataclass
class RunOutcome:
    code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    traceback: str = ""


_ENV = {"MOESIM_DEBUG": "1", "GIT_OPTIONAL_LOCKS": "0", "TORCHAO_FORCE_SKIP_LOADING_SO_FILES": "1"}


def run_in_process(argv: list[str], timeout_s: float) -> RunOutcome:
    """``moesim ARGV`` through :func:`moesim.cli.main` in this process (``MOESIM_DEBUG=1``: a bug raises)."""
    from moesim.cli import main as cli_main

    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ.update(_ENV)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    outcome = RunOutcome(None, "", "")
    try:
        # A fresh filter list: each run shows its warnings as a new process would (once per place, not
        # once per fuzz session), on the captured stderr.
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("default", RuntimeWarning)  # changing the filters resets "once per place"
            try:
                outcome.code = cli_main(list(argv))
            except SystemExit as exc:
                outcome.code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except _Timeout:
        outcome.timed_out = True
    except BaseException:  # noqa: BLE001 - any escape is the finding
        outcome.traceback = traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    outcome.stdout, outcome.stderr = out.getvalue(), err.getvalue()
    return outcome


def run_subprocess(argv: list[str], timeout_s: float) -> RunOutcome:
    """``python -m moesim ARGV`` as a user runs it (no ``MOESIM_DEBUG``), killed after ``timeout_s``."""
    env = {k: v for k, v in os.environ.items() if k != "MOESIM_DEBUG"}
    env.update({k: v for k, v in _ENV.items() if k != "MOESIM_DEBUG"})
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen([sys.executable, "-m", "moesim", *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return RunOutcome(None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), timed_out=True)
    return RunOutcome(proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def _leftovers(work: Path) -> list[str]:
    """Temporary files an atomic writer left behind anywhere under ``work``."""
    return sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.name.endswith(".tmp"))


def classify(outcome: RunOutcome, inv: Invocation, work: Path) -> tuple[str, str]:
    """(verdict, reason): verdict ``accepted`` (exit 0, outputs complete), ``rejected`` (a proper user
    error) or ``failure``."""
    if outcome.timed_out:
        return "failure", "hang: no exit within the timeout"
    if outcome.traceback:
        return "failure", "traceback: " + outcome.traceback.strip().splitlines()[-1][:300]
    if "Traceback" in outcome.stderr:
        return "failure", "traceback on stderr: " + outcome.stderr.strip().splitlines()[-1][:300]
    left = _leftovers(work)
    if left:
        return "failure", f"temporary file(s) left behind: {left}"
    if outcome.code == 0:
        try:
            inv.check(outcome.stdout)
        except OutputProblem as problem:
            return "failure", f"partial output after exit 0: {problem}"
        except Exception as err:  # noqa: BLE001 - reading the outputs must not crash the fuzzer
            return "failure", f"partial output after exit 0: {type(err).__name__}: {err}"
        return "accepted", ""
    if outcome.code == 2:
        lines = outcome.stderr.strip().splitlines()
        if len(lines) != 1 or "error:" not in lines[0]:
            return "failure", f"exit 2 with {len(lines)} stderr line(s), expected one 'error:' line: " \
                              f"{outcome.stderr.strip()[:300]!r}"
        if "internal error" in lines[0]:
            return "failure", f"exit 2 reporting an internal error: {lines[0][:300]}"
        if outcome.stdout.strip():
            return "failure", f"exit 2 with output on stdout: {outcome.stdout.strip()[:200]!r}"
        present = [str(p.name) for p in inv.outputs if p.exists()]
        present += [f"{d.name}/{f.name}" for d in inv.out_dirs if d.exists() for f in d.rglob("*")]
        present += [f"{d.name}/" for d in inv.out_dirs if d.exists() and not any(d.iterdir())]
        if present:
            return "failure", f"partial output after exit 2: {present}"
        return "rejected", lines[0][:300]
    return "failure", f"exit {outcome.code} (expected 0 or 2): {outcome.stderr.strip()[-300:]!r}"


# ----------------------------------------------------------------------------------------------------------
# The fuzz loop
# ----------------------------------------------------------------------------------------------------------


@dataclass
class InputResult:
    index: int
    surface: str
    seed: str
    mutation: str
    argv: list[str]
    mode: str  # "in-process" | "subprocess"
    verdict: str
    reason: str
    seconds: float
    kept: str = ""


@dataclass
class SurfaceStats:
    inputs: int = 0
    accepted: int = 0
    rejected: int = 0
    failures: int = 0
    subprocess: int = 0
    seconds: float = 0.0


@dataclass
class Summary:
    inputs: int
    seed: int
    wall_s: float
    surfaces: dict[str, SurfaceStats]
    failures: list[InputResult]
    specials: int = 0
    peak_rss_mb: float = 0.0  # the fuzzing process: bounds every in-process input
    peak_child_rss_mb: float = 0.0  # the largest subprocess input

    @property
    def totals(self) -> SurfaceStats:
        t = SurfaceStats()
        for s in self.surfaces.values():
            t.inputs += s.inputs
            t.accepted += s.accepted
            t.rejected += s.rejected
            t.failures += s.failures
            t.subprocess += s.subprocess
            t.seconds += s.seconds
        return t

    def as_dict(self) -> dict[str, Any]:
        return {"inputs": self.inputs, "seed": self.seed, "wall_s": round(self.wall_s, 1), "specials": self.specials,
                "peak_rss_mb": round(self.peak_rss_mb, 1), "peak_child_rss_mb": round(self.peak_child_rss_mb, 1),
                "surfaces": {k: asdict(v) for k, v in self.surfaces.items()}, "totals": asdict(self.totals),
                "failures": [asdict(f) for f in self.failures]}

    def table(self) -> str:
        head = f"{'surface':<15} {'inputs':>7} {'accepted':>9} {'rejected':>9} {'failures':>9} {'subproc':>8} {'s':>7}"
        lines = [head, "-" * len(head)]
        for name, s in [*self.surfaces.items(), ("TOTAL", self.totals)]:
            if name == "TOTAL":
                lines.append("-" * len(head))
            lines.append(f"{name:<15} {s.inputs:>7} {s.accepted:>9} {s.rejected:>9} {s.failures:>9} {s.subprocess:>8} "
                         f"{s.seconds:>7.1f}")
        lines.append(f"wall time {self.wall_s:.1f} s (seed {self.seed}); "
                     f"{self.totals.failures} failure(s): tracebacks, hangs, wrong exit codes, partial outputs")
        lines.append(f"{self.specials} special files (devices, FIFOs, folders, oversized, gzip bombs, two-step traces); "
                     f"peak RSS {self.peak_rss_mb:.0f} MB in process (bounds every in-process input), "
                     f"{self.peak_child_rss_mb:.0f} MB of any subprocess input")
        return "\n".join(lines)


def fuzz(inputs: int = 2000, seed: int = 0, *, timeout_s: float = 60.0, subprocess_fraction: float = 0.05,
         surfaces: Sequence[str] | None = None, keep_failures: Path | None = None, special_fraction: float = 0.07,
         progress: Callable[[int, int, InputResult], None] | None = None) -> Summary:
    """Run ``inputs`` mutated files over ``surfaces`` (default all, round-robin) and classify each run."""
    names = list(surfaces or SURFACES)
    unknown = [n for n in names if n not in SURFACES]
    if unknown:
        raise ValueError(f"unknown surface(s) {unknown}; known: {', '.join(SURFACES)}")
    seeds = build_seeds()
    keys = key_dictionary(seeds)
    stats = {n: SurfaceStats() for n in names}
    failures: list[InputResult] = []
    cache: dict[str, bytes] = {}
    specials = 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="moesim-fuzz-") as tmp:
        for i in range(inputs):
            surface = names[i % len(names)]
            rng = random.Random(f"moesim-fuzz:{seed}:{i}")
            chosen = rng.choice(seeds[surface])
            blob, mutation = make_input(rng, chosen, keys)
            work = Path(tmp) / f"{i:05d}"
            folder = work / "in" / (f"m{i}" if chosen.filename == "config.json" else "")
            folder.mkdir(parents=True)
            (work / "out").mkdir()
            path = folder / chosen.filename
            path.write_bytes(blob)
            special = random.Random(f"moesim-fuzz-special:{seed}:{i}")
            if special.random() < special_fraction:
                mutation = make_special(special, surface, path, cache)
                specials += 1
            inv = COMMANDS[surface](path, rng, work)
            as_subprocess = random.Random(f"moesim-fuzz-sub:{seed}:{i}").random() < subprocess_fraction
            start = time.perf_counter()
            outcome = run_subprocess(inv.argv, timeout_s) if as_subprocess else run_in_process(inv.argv, timeout_s)
            verdict, reason = classify(outcome, inv, work)
            result = InputResult(i, surface, chosen.label, mutation, inv.argv,
                                 "subprocess" if as_subprocess else "in-process", verdict, reason,
                                 time.perf_counter() - start)
            s = stats[surface]
            s.inputs += 1
            s.subprocess += as_subprocess
            s.seconds += result.seconds
            if verdict == "accepted":
                s.accepted += 1
            elif verdict == "rejected":
                s.rejected += 1
            else:
                s.failures += 1
                if keep_failures is not None:
                    dest = keep_failures / f"{i:05d}-{surface}"
                    dest.mkdir(parents=True, exist_ok=True)
                    if path.is_file() and not path.is_symlink() and path.stat().st_size <= 1 << 24:
                        shutil.copy2(path, dest / chosen.filename)  # special files are named in the mutation
                    (dest / "failure.json").write_text(json.dumps(asdict(result), indent=1) + "\n", encoding="utf-8")
                    result.kept = str(dest)
                failures.append(result)
            shutil.rmtree(work, ignore_errors=True)
            if progress is not None:
                progress(i + 1, inputs, result)
    kib = 1024.0 if sys.platform != "darwin" else 1024.0 * 1024.0  # ru_maxrss: KiB on Linux, bytes on macOS
    return Summary(inputs, seed, time.perf_counter() - t0, stats, failures, specials,
                   resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / kib * 1.048576,
                   resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / kib * 1.048576)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--inputs", type=int, default=2000, help="mutated files to run (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the mutations (default 0)")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="per input: longer is a hang (default 60)")
    parser.add_argument("--subprocess-fraction", type=float, default=0.05,
                        help="share of inputs run as real `python -m moesim` processes (default 0.05)")
    parser.add_argument("--surface", action="append", choices=SURFACES, help="only these surfaces (repeatable)")
    parser.add_argument("--special-fraction", type=float, default=0.07,
                        help="share of inputs replaced by a special file (device, FIFO, folder, oversized, "
                             "gzip bomb, two-step trace; default 0.07)")
    parser.add_argument("--keep-failures", type=Path, help="copy each failing input (and its verdict) here")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if args.inputs < 1 or args.timeout_s <= 0 or not 0 <= args.subprocess_fraction <= 1:
        parser.error("--inputs must be >= 1, --timeout-s > 0, --subprocess-fraction in [0, 1]")

    def progress(done: int, total: int, result: InputResult) -> None:
        if result.verdict == "failure":
            print(f"FAIL #{result.index} {result.surface} ({result.seed}; {result.mutation}): {result.reason}",
                  file=sys.stderr, flush=True)
        if not args.quiet and (done % 100 == 0 or done == total):
            print(f"fuzz: {done}/{total} inputs", file=sys.stderr, flush=True)

    summary = fuzz(args.inputs, args.seed, timeout_s=args.timeout_s, subprocess_fraction=args.subprocess_fraction,
                   surfaces=args.surface, keep_failures=args.keep_failures,
                   special_fraction=args.special_fraction, progress=progress)
    if args.json:
        print(json.dumps(summary.as_dict(), indent=1))
    else:
        print(summary.table())
        for f in summary.failures:
            print(f"\nFAILURE #{f.index} [{f.surface}, seed file {f.seed}, {f.mode}] {f.reason}\n"
                  f"  mutation: {f.mutation}\n  command: moesim {' '.join(f.argv)}"
                  + (f"\n  input kept: {f.kept}" if f.kept else ""))
    return 1 if summary.failures or max(summary.peak_rss_mb, summary.peak_child_rss_mb) >= 1000 else 0


if __name__ == "__main__":
    sys.exit(main())
