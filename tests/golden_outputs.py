"""Characterisation of moesim's outputs: every number a matrix of predictions prints, pinned.

The 28 measured runs pin the paths the dataset's plans take (``tests/sim/test_interval_data.py``); most of
what a user asks for is elsewhere: other backends, schedules, precisions, recompute choices, skewed routing,
oversubscribed fabrics, single MoE layers, plan bounds, predicted traces, prediction intervals. This module
names a matrix of such cases, each varying a few plan fields from a small base so that every value of every
field appears at least once, and records every number and label each case's output holds (step time, the
breakdown, the hidden communication, the memory parts, the communication report, the bottleneck, the trace's
per-stream totals, the interval) in ``tests/data/golden_outputs.json``. ``tests/test_golden_outputs.py`` fails on
any difference beyond float noise and names the case and the field.

A change that means to move these numbers regenerates the file and the diff is reviewed with it::

    python tests/golden_outputs.py --write
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOLDEN_FILE = ROOT / "tests" / "data" / "golden_outputs.json"
#: relative tolerance of a pinned float: the CI machine's float noise, far below any modelled effect
REL_TOL = 1e-9

#: (case name, model, cluster template, GPUs, stack, plan fields): every field value appears at least once
PREDICTION_CASES: list[tuple[str, str, str, int, str, dict[str, Any]]] = [
    ("base-b200-fsdp", "debug", "hgx-b200", 8, "torchtitan", {"ep": 4}),
    ("ep1-no-ac", "debug", "hgx-b200", 8, "torchtitan", {"ac": "none"}),
    ("selective-ac", "debug", "hgx-b200", 8, "megatron", {"ep": 8, "ac": "selective"}),
    ("selective-ac-modules", "debug", "hgx-b200", 8, "megatron",
     {"ep": 8, "ac": "selective", "recompute_modules": "mla_up_proj,moe_act"}),
    ("deepep-mxfp8", "deepseek-v3-16b", "hgx-b200", 16, "torchtitan", {"ep": 16, "ep_backend": "deepep",
                                                             "precision": "mxfp8"}),
    ("deepep-ll-grouped", "deepseek-v3-16b", "hgx-b200", 16, "torchtitan", {"ep": 16, "ep_backend": "deepep-ll",
                                                                  "precision": "mxfp8-grouped"}),
    ("hybridep-nvl72", "deepseek-v3-16b", "gb200-nvl72", 32, "megatron", {"ep": 32, "ep_backend": "hybridep",
                                                                "precision": "fp8-blockwise"}),
    ("fp8-current-h100", "debug", "hgx-h100", 16, "megatron", {"ep": 8, "precision": "fp8-current",
                                                                "grad_reduce_dtype": "bf16"}),
    ("pp2-1f1b", "debug", "hgx-b200", 16, "torchtitan", {"pp": 2, "ep": 8, "global_batch": 32}),
    ("pp2-interleaved", "debug", "hgx-b200", 16, "megatron", {"pp": 2, "vpp": 2, "pp_schedule": "interleaved-1f1b",
                                                              "ep": 8, "global_batch": 32}),
    ("pp2-interleaved-overlap", "debug", "hgx-b200", 16, "megatron",
     {"pp": 2, "vpp": 2, "pp_schedule": "interleaved-1f1b", "ep": 8, "global_batch": 32, "ep_overlap": True,
      "ep_backend": "deepep"}),
    ("ep-overlap-pp1", "deepseek-v3-16b", "hgx-b200", 16, "megatron", {"ep": 16, "ep_overlap": True}),
    ("dualpipe", "debug", "h800-deepseek", 16, "deepseek", {"pp": 2, "pp_schedule": "dualpipe", "ep": 8,
                                                            "global_batch": 32, "ep_backend": "deepep",
                                                            "precision": "fp8-blockwise"}),
    ("dualpipev-overlap", "debug", "h800-deepseek", 16, "deepseek",
     {"pp": 2, "pp_schedule": "dualpipev", "ep": 8, "global_batch": 32, "ep_backend": "deepep",
      "ep_overlap": True}),
    ("tp2-etp2", "debug", "hgx-h200", 16, "megatron", {"tp": 2, "etp": 2, "ep": 4}),
    ("tp2-cp2", "debug", "hgx-b300", 16, "megatron-26.02", {"tp": 2, "cp": 2, "ep": 4, "seq_len": 8192}),
    ("hsdp", "debug", "hgx-b200", 16, "torchtitan", {"dp_replicate": 2, "dp_shard": 8, "ep": 8}),
    ("zipf-routing", "deepseek-v3-16b", "hgx-b200", 16, "torchtitan", {"ep": 16, "routing": "zipf:1.2", "routing_seed": 3}),
    ("dirichlet-deepep", "deepseek-v3-16b", "hgx-b200", 16, "torchtitan",
     {"ep": 16, "routing": "dirichlet:0.5", "ep_backend": "deepep", "deepep_sms": 24}),
    ("zipf-expert-capacity", "deepseek-v3-16b", "hgx-b200", 16, "torchtitan",
     {"ep": 16, "routing": "zipf:1.2", "routing_seed": 3, "expert_capacity_factor": 1.25}),
    ("pad-to-capacity", "deepseek-v3-16b", "hgx-b200", 16, "torchtitan",
     {"ep": 16, "expert_capacity_factor": 1.5, "pad_to_capacity": True}),
    ("collapsed-rank-budget", "deepseek-v3-16b", "gb300-nvl72", 16, "megatron-26.04",
     {"ep": 16, "ep_backend": "hybridep", "routing": "collapse:6", "ep_rank_capacity_factor": 3.0}),
    ("microbatch2-seq1024", "debug", "hgx-b200", 8, "torchtitan", {"ep": 8, "micro_batch": 2, "seq_len": 1024,
                                                                   "global_batch": 32}),
    ("graphs-none", "deepseek-v3-16b", "gb300-nvl72", 16, "megatron-26.04", {"ep": 16, "cuda_graphs": "none"}),
    ("graphs-partial", "deepseek-v3-16b", "gb300-nvl72", 16, "megatron-26.04", {"ep": 16, "cuda_graphs": "partial"}),
    ("graphs-full", "deepseek-v3-16b", "gb300-nvl72", 16, "megatron-26.04", {"ep": 16, "cuda_graphs": "full"}),
    ("pp-layout", "debug", "hgx-b200", 16, "megatron", {"pp": 2, "ep": 8, "global_batch": 32,
                                                        "pp_layout": "Et|tttL"}),
    ("mtp", "deepseek-v3-16b", "hgx-h100", 64, "megatron", {"ep": 8, "pp": 2, "mtp_layers": 1, "global_batch": 128,
                                                            "seq_len": 2048}),
    ("gqa-qwen3", "qwen3-30b-a3b", "hgx-b200", 32, "torchtitan", {"ep": 8, "seq_len": 2048, "global_batch": 64}),
    ("mixtral-fp32-grads", "mixtral-8x22b", "hgx-h100", 64, "megatron",
     {"tp": 2, "ep": 8, "pp": 4, "global_batch": 64, "grad_reduce_dtype": "fp32"}),
    ("oversubscribed-fabric", "deepseek-v3-16b", "hgx-b200", 64, "torchtitan", {"ep": 64}),
    ("skewed-overlap-deepep", "debug", "hgx-b200", 32, "megatron",
     {"pp": 2, "vpp": 2, "pp_schedule": "interleaved-1f1b", "ep": 8, "ep_overlap": True, "ep_backend": "deepep",
      "routing": "zipf:1.0", "global_batch": 64}),
    ("dualpipev-skewed", "deepseek-v3-16b", "h800-deepseek", 64, "deepseek",
     {"pp": 2, "pp_schedule": "dualpipev", "ep": 32, "ep_backend": "deepep", "ep_overlap": True,
      "routing": "dirichlet:1.0", "global_batch": 256, "seq_len": 512}),
    ("nic-400g-vs-800g", "deepseek-v3-16b", "hgx-b200-800g", 64, "torchtitan", {"ep": 64, "ep_backend": "deepep"}),
]

#: (case name, cell fields): single MoE layers, forward and backward (:mod:`sim.layer_check`)
LAYER_CASES: list[tuple[str, dict[str, Any]]] = [
    ("layer-nccl-bf16", {"ep": 8, "ep_backend": "nccl", "precision": "bf16"}),
    ("layer-ep1", {"ep": 1, "gpus": 1, "ep_backend": "nccl", "precision": "bf16"}),
    ("layer-deepep-fp8", {"ep": 8, "ep_backend": "deepep", "precision": "fp8-blockwise"}),
    ("layer-hybridep-bf16", {"ep": 8, "ep_backend": "hybridep", "precision": "bf16"}),
    ("layer-nccl-fp8-current", {"ep": 8, "ep_backend": "nccl", "precision": "fp8-current", "stack": "megatron"}),
]


def _cluster(template: str, gpus: int, case: str) -> Any:
    from sim.catalog import load_cluster

    cluster = load_cluster(template, n_gpus=gpus)
    if case == "oversubscribed-fabric":  # 8 nodes, two per leaf, leaves 2:1 and spine 3:1 oversubscribed
        fabric = dataclasses.replace(cluster.fabric, nodes_per_leaf=2, leaf_oversubscription=2.0,
                                     spine_oversubscription=3.0)
        cluster = dataclasses.replace(cluster, fabric=fabric)
    return cluster


def _plan(fields: dict[str, Any], gpus: int) -> Any:
    from sim.specs import ParallelPlan

    fields = dict(fields)
    model_parallel = fields.get("tp", 1) * fields.get("pp", 1) * fields.get("cp", 1)
    fields.setdefault("dp_shard", gpus // (model_parallel * fields.get("dp_replicate", 1)))
    fields.setdefault("seq_len", 1024)
    dp = fields["dp_shard"] * fields.get("dp_replicate", 1)
    fields.setdefault("global_batch", 4 * dp * fields.get("micro_batch", 1))
    return ParallelPlan(**fields)


def _trace_totals(pred: Any) -> dict[str, Any]:
    """Per (thread, event name prefix) the count and summed duration of the predicted Chrome trace."""
    from sim.trace import chrome_trace_events, predicted_hidden_share

    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for ev in chrome_trace_events(pred):
        if ev.get("ph") != "X":
            continue
        key = f"{ev.get('pid')}/{ev.get('tid')}/{str(ev.get('name', '')).split('[')[0]}"
        totals[key][0] += 1
        totals[key][1] += float(ev.get("dur", 0.0))
    return {"events": {k: v for k, v in sorted(totals.items())}, "hidden_share": predicted_hidden_share(pred)}


def prediction_outputs() -> Iterator[tuple[str, dict[str, Any]]]:
    """Each prediction case's whole output: the prediction, its trace totals and its interval."""
    from sim.catalog import load_model
    from sim.predict import predict
    from sim.uncertainty import prediction_interval

    for name, model, template, gpus, stack, fields in PREDICTION_CASES:
        pred = predict(load_model(model), _cluster(template, gpus, name), _plan(fields, gpus), stack=stack)
        out = pred.to_dict()
        out["trace"] = _trace_totals(pred)
        out["chunks"] = [{"layers": ch.layers, "f_s": ch.f_s, "b_s": ch.b_s, "w_s": ch.w_s, "f_comm": ch.f_comm,
                          "b_comm": ch.b_comm} for ch in pred.trace_data["chunks"]]
        interval = prediction_interval(pred)
        out["interval"] = dataclasses.asdict(interval) if dataclasses.is_dataclass(interval) else interval
        yield name, out


def layer_outputs() -> Iterator[tuple[str, dict[str, Any]]]:
    """Each single-MoE-layer case's forward and backward seconds and parts."""
    from sim.layer_check import MoELayerCell, predict_moe_layer

    for name, fields in LAYER_CASES:
        cell = MoELayerCell(**{"id": name, "dim": 1024, "moe_inter_dim": 512, "n_experts": 32, "top_k": 4,
                               "cluster": "hgx-h100", "gpus": 8, "tokens_per_gpu": 2048, **fields})
        yield name, dataclasses.asdict(predict_moe_layer(cell))


#: prediction cases whose per-rank op lists are pinned op by op (every workload-shaping field varies among them)
WORKLOAD_CASES = ("base-b200-fsdp", "ep1-no-ac", "selective-ac-modules", "deepep-mxfp8", "deepep-ll-grouped",
                  "hybridep-nvl72", "fp8-current-h100", "dualpipe", "tp2-etp2", "tp2-cp2", "microbatch2-seq1024",
                  "mtp", "gqa-qwen3", "mixtral-fp32-grads")


def _op_row(op: Any) -> dict[str, Any]:
    """An op's fields that differ from :class:`~sim.workload.OpSpec`'s defaults (the name and kind always)."""
    from sim.workload import OpSpec

    default = {f.name: f.default for f in dataclasses.fields(OpSpec)}
    return {k: v for k, v in dataclasses.asdict(op).items() if k in ("name", "kind") or v != default[k]}


def workload_outputs() -> Iterator[tuple[str, dict[str, Any]]]:
    """Each :data:`WORKLOAD_CASES` case's op lists: every layer kind's forward, backward and recompute ops, and
    the once-per-step ops (:class:`sim.workload.Workload`)."""
    from sim.catalog import load_model
    from sim.stacks import load_stack
    from sim.workload import Workload

    cases = {c[0]: c for c in PREDICTION_CASES}
    for name in WORKLOAD_CASES:
        _, model_name, _template, gpus, stack, fields = cases[name]
        model = load_model(model_name)
        wl = Workload(model, _plan(fields, gpus), load_stack(stack))
        kinds = ["embed", "dense" if model.n_dense_layers else None, "moe" if model.n_moe_layers else None,
                 *wl.last_chunk_tail()]
        out = {f"{kind}.{phase}": [_op_row(op) for op in wl.layer_ops(kind, phase)]
               for kind in dict.fromkeys(k for k in kinds if k) for phase in ("fwd", "bwd", "recompute")}
        out["step"] = [_op_row(op) for op in wl.step_ops()]
        yield f"workload:{name}", out


def bound_outputs() -> Iterator[tuple[str, dict[str, Any]]]:
    """The schedule's lower bound of each pipelined prediction case (what a plan search prunes with)."""
    from sim.calibration import default_inputs
    from sim.catalog import load_model
    from sim.predict import simulation_context, step_lower_bound_s
    from sim.stacks import load_stack

    for name, model, template, gpus, stack_name, fields in PREDICTION_CASES:
        if fields.get("pp", 1) == 1:
            continue
        stack = load_stack(stack_name)
        cluster = stack.place(_cluster(template, gpus, name))
        costs, stack = default_inputs(cluster.gpu, stack)
        ctx = simulation_context(load_model(model), cluster, _plan(fields, gpus), costs, stack)
        yield f"bound:{name}", {"step_lower_bound_s": step_lower_bound_s(ctx)}


#: bundled calibrations, each predicting one plan on its GPU with the stack it was measured with
CALIBRATION_CASES: list[tuple[str, str, str, str]] = [
    ("h100-published", "hgx-h100", "megatron", "nccl"),
    ("b200-published", "hgx-b200", "torchtitan", "deepep"),
    ("gb200-published", "gb200-nvl72", "megatron", "hybridep"),
    ("h800-deepseek-trace", "h800-deepseek", "deepseek", "deepep"),
]


def input_outputs() -> Iterator[tuple[str, dict[str, Any]]]:
    """What the built-in inputs parse to: every catalog model, GPU and cluster template, every stack profile,
    every bundled calibration's cost model and one prediction with it."""
    from sim.calibration import calibrated_inputs, load_calibration, to_cost_model
    from sim.catalog import (
        cluster_names,
        gpu_names,
        load_cluster,
        load_gpu,
        load_model,
        model_names,
    )
    from sim.predict import predict
    from sim.stacks import load_stack, stack_names

    yield "inputs:models", {n: dataclasses.asdict(load_model(n)) for n in model_names()}
    yield "inputs:gpus", {n: dataclasses.asdict(load_gpu(n)) for n in gpu_names()}
    yield "inputs:clusters", {n: dataclasses.asdict(load_cluster(n)) for n in cluster_names()}
    yield "inputs:stacks", {n: dataclasses.asdict(load_stack(n)) for n in stack_names()}
    for name, template, stack_name, backend in CALIBRATION_CASES:
        cal = load_calibration(name)
        cluster = load_cluster(template, n_gpus=64)
        costs, stack = calibrated_inputs(cal, cluster.gpu, load_stack(stack_name))
        pred = predict(load_model("deepseek-v3-16b"), cluster,
                       _plan({"ep": 8, "ep_backend": backend, "seq_len": 2048}, 64), costs, stack=stack)
        yield f"calibration:{name}", {"cost_model": dataclasses.asdict(to_cost_model(cal)),
                                      "prediction": pred.to_dict()}


#: what a corrupted field becomes, by label: each kind of wrong value a hand-edited file holds
BAD_VALUES: dict[str, Any] = {"text": "x", "negative": -1, "zero": 0, "huge": 1e300, "nan": math.nan,
                              "bool": True, "list": [], "table": {}}


def corruptions(data: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every one-field corruption of the nested table ``data``: per key, the key removed and each of
    :data:`BAD_VALUES`; inside a list, its first item's corruptions only. Yields (label, corrupted copy)."""
    import copy

    if isinstance(data, dict):
        for key in data:
            gone = copy.deepcopy(data)
            del gone[key]
            yield f"{path}/{key}: removed", gone
            for label, bad in BAD_VALUES.items():
                yield f"{path}/{key}: {label}", {**copy.deepcopy(data), key: bad}
            for label, inner in corruptions(data[key], f"{path}/{key}"):
                yield label, {**copy.deepcopy(data), key: inner}
    elif isinstance(data, list) and data:
        for label, inner in corruptions(data[0], f"{path}[0]"):
            yield label, [inner, *copy.deepcopy(data[1:])]


def _outcome(parse: Any, data: Any) -> str:
    """"ok" when ``parse`` accepts ``data``, else the user error's type and whole message. Anything but a
    :class:`~sim.errors.MoesimError` propagates (a bad file is never an internal error)."""
    from sim.errors import MoesimError

    try:
        parse(data)
    except MoesimError as err:
        return f"{type(err).__name__}: {err}"
    return "ok"


def _toml(path: Path) -> dict[str, Any]:
    import tomllib

    data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    return data


def _first_entries(doc: dict[str, Any], keys: tuple[str, ...], n: int = 3) -> dict[str, Any]:
    """``doc`` with only the first ``n`` entries of its tables ``keys`` (hundreds of entries of one shape)."""
    return {k: dict(list(v.items())[:n]) if k in keys else v for k, v in doc.items()}


def error_surfaces() -> dict[str, tuple[Any, Any]]:
    """Per input surface: (a valid table, the parser a file's table goes through)."""
    from sim.calibration import bundled_path, parse_calibration
    from sim.catalog import load_gpu
    from sim.loaders import (
        cluster_from_mapping,
        gpu_from_mapping,
        model_from_mapping,
        plan_from_mapping,
    )
    from sim.scenarios import scenario_from_mapping
    from sim.stacks import _from_data

    sim_dir = ROOT / "sim"
    models, gpus = _toml(sim_dir / "catalog" / "models.toml"), _toml(sim_dir / "catalog" / "gpus.toml")
    clusters = _toml(sim_dir / "catalog" / "clusters.toml")
    b200 = load_gpu("b200")
    return {
        "calibration:b200-published": (json.loads(bundled_path("b200-published").read_text(encoding="utf-8")),
                                       lambda d: parse_calibration(json.dumps(d), "golden")),
        "calibration:h800-deepseek-trace": (_first_entries(
            json.loads(bundled_path("h800-deepseek-trace").read_text(encoding="utf-8")), ("residuals", "op_seconds")),
            lambda d: parse_calibration(json.dumps(d), "golden")),
        "stack:torchtitan": (_toml(sim_dir / "stack_profiles" / "torchtitan.toml"),
                             lambda d: _from_data("golden", d, builtin=False)),
        "stack:deepseek": (_toml(sim_dir / "stack_profiles" / "deepseek.toml"),
                           lambda d: _from_data("golden", d, builtin=True)),
        "model:deepseek-v3-671b": (models["deepseek-v3-671b"], lambda d: model_from_mapping(d, "golden")),
        "model:qwen3-30b-a3b": (models["qwen3-30b-a3b"], lambda d: model_from_mapping(d, "golden")),
        "gpu:b200": (gpus["b200"], lambda d: gpu_from_mapping(d, "golden")),
        "cluster:gb200-nvl72": (clusters["gb200-nvl72"], lambda d: cluster_from_mapping(d, "golden", b200)),
        "plan": ({"tp": 2, "pp": 2, "pp_schedule": "interleaved-1f1b", "vpp": 2, "ep": 32, "dp_shard": 64,
                  "seq_len": 8192, "global_batch": 4096, "ac": "selective", "recompute_modules": "moe_act",
                  "precision": "mxfp8", "ep_backend": "deepep", "routing": "zipf:1.1", "mtp_layers": 1},
                 plan_from_mapping),
        "scenario:dsv3-671b-b200": (_toml(sim_dir / "scenarios" / "dsv3-671b-b200.toml"),
                                    lambda d: scenario_from_mapping(d, "golden")),
    }


def error_outputs() -> Iterator[tuple[str, dict[str, Any]]]:
    """Per input surface, what each one-field corruption of a valid table gives: accepted, or the message."""
    for surface, (valid, parse) in error_surfaces().items():
        assert _outcome(parse, valid) == "ok", surface
        yield f"errors:{surface}", {label: _outcome(parse, bad) for label, bad in corruptions(valid)}


def _fitted(doc: dict[str, Any]) -> dict[str, Any]:
    """A calibration document without what names the machine and the moment it was written."""
    return {k: v for k, v in doc.items() if k != "provenance"}


def synthetic_calibration_outputs() -> Iterator[tuple[str, dict[str, Any]]]:
    """Fits of moesim-op-event traces (:mod:`calibrate.synthetic`): noiseless, noisy, and with an overlap
    slowdown."""
    import tempfile

    from calibrate.document import fit_document
    from calibrate.synthetic import synthetic_trace

    variants: dict[str, dict[str, Any]] = {"calibrate:synthetic-exact": {"noise": 0.0},
                "calibrate:synthetic-noisy": {"noise": 0.05, "seed": 7},
                "calibrate:synthetic-slowdown": {"noise": 0.0, "slowdown": 0.25, "held_sms": 24}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, kwargs in variants.items():
            path = Path(tmp) / "trace.json"
            path.write_text(json.dumps({"traceEvents": synthetic_trace(**kwargs)}), encoding="utf-8")
            yield name, _fitted(fit_document([path], gpu="h100", name="golden"))


def trace_calibration_outputs(trace: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """DeepSeek's real H800 trace: the fitted document, and the comparison of the trace with its replay, in
    sample and with layer 1 held out."""
    from calibrate.compare import compare_reading, summary_lines
    from calibrate.document import fit_document
    from calibrate.rules import read_job_trace
    from calibrate.traces import load_document
    from sim.calibration import parse_calibration

    doc = fit_document([trace], name="golden")
    yield "calibrate:deepseek-trace", _fitted(doc)
    reading = read_job_trace(load_document(trace)[0])
    comp = compare_reading(reading, parse_calibration(json.dumps(doc), "golden"))
    yield "compare:deepseek-trace", {**comp.to_dict(), "summary": summary_lines(comp)}
    held = fit_document([trace], name="golden", exclude_layer=1)
    yield "compare:deepseek-trace-layer1-held-out", compare_reading(
        reading, parse_calibration(json.dumps(held), "golden"), layer=1).to_dict()


def _json(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(data, default=str))
    return out


def sim_outputs() -> dict[str, Any]:
    """Every simulator case's output (predictions, layers, bounds), as JSON-ready data."""
    out: dict[str, Any] = {}
    for gen in (prediction_outputs, layer_outputs, bound_outputs, input_outputs, workload_outputs, error_outputs):
        out.update(gen())
    return _json(out)


def calibrate_outputs(trace: Path | None) -> dict[str, Any]:
    """Every calibrator case's output; DeepSeek's trace's cases only when ``trace`` is given."""
    out = dict(synthetic_calibration_outputs())
    if trace is not None:
        out.update(trace_calibration_outputs(trace))
    return _json(out)


def all_outputs() -> dict[str, Any]:
    """Every case's output, as JSON-ready data (the trace's cases when DeepSeek's trace is beside the checkout)."""
    from tests.shared_trace import TRACE

    return {**sim_outputs(), **calibrate_outputs(TRACE if TRACE.exists() else None)}


def differences(stored: Any, today: Any, path: str = "") -> Iterator[str]:
    """Where ``today`` differs from ``stored``: floats beyond :data:`REL_TOL`, anything else exactly."""
    if isinstance(stored, dict) and isinstance(today, dict):
        for key in sorted(set(stored) | set(today)):
            if key not in stored or key not in today:
                yield f"{path}/{key}: {'added' if key in today else 'gone'}"
            else:
                yield from differences(stored[key], today[key], f"{path}/{key}")
    elif isinstance(stored, list) and isinstance(today, list):
        if len(stored) != len(today):
            yield f"{path}: {len(stored)} items -> {len(today)}"
        for i, (a, b) in enumerate(zip(stored, today)):
            yield from differences(a, b, f"{path}[{i}]")
    elif (isinstance(stored, float) or isinstance(today, float)) and not isinstance(stored, bool) \
            and isinstance(stored, (int, float)) and isinstance(today, (int, float)):
        if not math.isclose(stored, today, rel_tol=REL_TOL, abs_tol=1e-300):
            yield f"{path}: {stored!r} -> {today!r}"
    elif stored != today:
        yield f"{path}: {stored!r} -> {today!r}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {GOLDEN_FILE.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    today = all_outputs()
    if args.write:
        GOLDEN_FILE.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN_FILE.write_text(json.dumps(today, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {len(today)} cases to {GOLDEN_FILE.relative_to(ROOT)}")
        return 0
    stored = json.loads(GOLDEN_FILE.read_text(encoding="utf-8"))
    diffs = list(differences(stored, today))
    print("\n".join(diffs) or f"{len(today)} cases as stored")
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
