"""The calibration file: versioned, validated, with provenance; loads into a :class:`~sim.costs.CostModel`.

A calibration is what ``moesim calibrate fit`` / ``run`` writes and what ``moesim predict --calibration``
reads. Schema ``moesim.calibration`` version 2 (one JSON object)::

    schema, version, name, gpu            which device the fitted rates belong to (catalog GPU name, or
                                           any name with a ``device_spec`` for devices outside the catalog)
    provenance {device, driver, torch, torchao, deep_ep, git, date, sources[], method}
    kernels {family: "real" | "emulated" | "absent"}   what ran for real (e.g. MXFP8 emulated on Hopper)
    gemm_eff / grouped_gemm_eff {dtype: {sizes[], values[]}}   efficiency curves (peak x eff(size))
    attn_fwd_eff, attn_bwd_eff, mem_bw_eff, quantize_bw_eff     single efficiencies
    attn_eff {fwd|bwd: {sizes[], values[]}}                     attention efficiency vs FLOPs per call
    launch_overhead_s, host_sync_s                              host and launch gaps
    sm_sharing {comm_sms, fitted_slowdown, model_slowdown}     compute slowdown under communication
    comm {CommCosts field: number}                              overrides of the network model
    comm_rates {kind: {bytes, seconds, bytes_per_s, overhead_s}} in-training rates the fit measured
    stack_efficiency {arch: {op class: value}}                  pass ratios for the stack profiles
    op_seconds {op: seconds}                                    measured ops the fit had no shape for
    device_spec {GPUSpec fields}                                a non-catalog device (e.g. a CPU)
    residuals {table: {n, median_abs_rel, p10_rel, p90_rel}}    how well each fitted table fits
    sources {key: text}                                          where every number comes from

Only ``schema``, ``version``, ``name``, ``gpu`` and ``provenance`` are required; an absent table keeps
moesim's default. Every error names the field and the value and raises :class:`~sim.errors.ConfigError`.

>>> cal = parse_calibration('{"schema": "moesim.calibration", "version": 2, "name": "x", "gpu": "h800",'
...                         ' "provenance": {"method": "doc"}, "attn_fwd_eff": 0.5}', "doc")
>>> cal.tables["attn_fwd_eff"]
0.5
>>> parse_calibration('{"schema": "moesim.calibration", "version": 9}', "doc")
Traceback (most recent call last):
...
sim.errors.ConfigError: doc: version 9 is not supported (this moesim reads moesim.calibration version 2)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.costs import CostModel
    from sim.specs import GPUSpec
    from sim.stacks import StackProfile
from sim.specs import GPUSpec

__all__ = ["SCHEMA", "VERSION", "Calibration", "parse_calibration", "load_calibration", "bundled_path",
           "BUNDLED", "STACK_CALIBRATIONS", "default_inputs", "stack_calibration", "to_cost_model", "calibration_stack", "calibrated_inputs",
           "COST_TABLES", "INFORMATION_TABLES", "device_gpu_spec", "MAX_NESTING"]

SCHEMA = "moesim.calibration"
VERSION = 2
MAX_NESTING = 8
BUNDLED = ("h800-deepseek-trace", "b200-published", "h100-published", "gb200-published")
#: The bundled calibration each named stack profile takes its kernel rates from (sim.stacks reads this).
STACK_CALIBRATIONS = {"deepseek": "h800-deepseek-trace"}

_PROVENANCE_KEYS = ("device", "driver", "torch", "torchao", "deep_ep", "git", "date", "sources", "method")
_KERNEL_STATES = ("real", "emulated", "absent")
_SCALARS = ("attn_fwd_eff", "attn_bwd_eff", "mem_bw_eff", "quantize_bw_eff")
_GAPS = ("launch_overhead_s", "host_sync_s")
#: Every :class:`~sim.specs.GPUSpec` field a ``device_spec`` may set, with its type (read off the dataclass).
_DEVICE_FIELDS: dict[str, type] = {k: {"str": str, "int": int, "bool": bool}.get(str(t), float)
                                   for k, t in ((f.name, f.type) for f in dataclasses.fields(GPUSpec))}
#: Fields whose datasheet value may be 0 (0: not modelled / not available); every other number is positive.
_DEVICE_ZERO_OK = ("fp4_flops", "exp_per_s")
_TOP = ("schema", "version", "name", "gpu", "provenance", "kernels", "gemm_eff", "grouped_gemm_eff", "attn_eff",
        *_SCALARS,
        *_GAPS, "sm_sharing", "comm", "comm_rates", "stack_efficiency", "op_seconds", "device_spec", "residuals",
        "sources", "notes")


@dataclass(frozen=True)
class Calibration:
    """A validated calibration file. ``tables`` holds every fitted table by its top-level key."""

    name: str
    gpu: str
    provenance: Mapping[str, Any]
    tables: Mapping[str, Any] = field(default_factory=dict)
    path: str = ""

    def summary(self) -> dict[str, Any]:
        """What a prediction names: the path, the device, how it was made and from what."""
        p = self.provenance
        return {"name": self.name, "path": self.path, "gpu": self.gpu, "device": p.get("device"),
                "method": p.get("method"), "date": p.get("date"), "git": p.get("git"),
                "sources": list(p.get("sources", []))}

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "version": VERSION, "name": self.name, "gpu": self.gpu,
                "provenance": dict(self.provenance), **self.tables}


# --- validation helpers ----------------------------------------------------------------------------------
def _where(origin: str, key: str) -> str:
    return f"{origin}: {key}"


def _number(origin: str, key: str, value: Any, *, positive: bool = False, lo: float | None = None,
            hi: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{_where(origin, key)} must be a number, got {value!r}")
    try:
        v = float(value)
    except OverflowError:  # an integer past float's range
        raise ConfigError(f"{_where(origin, key)} must be finite, got {_short(value)}") from None
    if not math.isfinite(v):
        raise ConfigError(f"{_where(origin, key)} must be finite, got {value!r}")
    if positive and v <= 0:
        raise ConfigError(f"{_where(origin, key)} must be positive, got {value!r}")
    if lo is not None and v < lo or hi is not None and v > hi:
        raise ConfigError(f"{_where(origin, key)} must be in [{lo}, {hi}], got {value!r}")
    return v


def _mapping(origin: str, key: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{_where(origin, key)} must be an object, got {type(value).__name__} {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _depth(value: Any, limit: int) -> int:
    stack: list[tuple[Any, int]] = [(value, 1)]
    deepest = 0
    while stack:
        item, d = stack.pop()
        deepest = max(deepest, d)
        if d > limit:
            return d
        if isinstance(item, Mapping):
            stack.extend((v, d + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, d + 1) for v in item)
    return deepest


def _curve(origin: str, key: str, value: Any) -> dict[str, list[float]]:
    data = _mapping(origin, key, value)
    extra = set(data) - {"sizes", "values"}
    if extra:
        raise ConfigError(f"{_where(origin, key)}: unknown key {sorted(extra)[0]!r} (known: sizes, values)")
    for part in ("sizes", "values"):
        if not isinstance(data.get(part), list) or not data[part]:
            raise ConfigError(f"{_where(origin, key)}.{part} must be a non-empty list, got {_short(data.get(part))}")
    if len(data["sizes"]) != len(data["values"]):
        raise ConfigError(f"{_where(origin, key)}: sizes ({len(data['sizes'])}) and values ({len(data['values'])}) "
                          "differ in length")
    sizes = [_number(origin, f"{key}.sizes[{i}]", s, positive=True) for i, s in enumerate(data["sizes"])]
    values = [_number(origin, f"{key}.values[{i}]", v, positive=True, hi=1.5) for i, v in enumerate(data["values"])]
    if any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise ConfigError(f"{_where(origin, key)}.sizes must increase, got {sizes}")
    return {"sizes": sizes, "values": values}


def _numbers_table(origin: str, key: str, value: Any, **bounds: Any) -> dict[str, float]:
    return {str(k): _number(origin, f"{key}.{k}", v, **bounds) for k, v in _mapping(origin, key, value).items()}


def _validate_tables(data: Mapping[str, Any], origin: str) -> dict[str, Any]:
    from sim.stacks import OP_CLASSES

    out: dict[str, Any] = {}
    if "attn_eff" in data:
        table = _mapping(origin, "attn_eff", data["attn_eff"])
        for d in table:
            if d not in ("fwd", "bwd"):
                raise ConfigError(f"{origin}: attn_eff.{d}: unknown pass (known: fwd, bwd)")
        out["attn_eff"] = {str(d): _curve(origin, f"attn_eff.{d}", c) for d, c in table.items()}
    for key in ("gemm_eff", "grouped_gemm_eff"):
        if key in data:
            out[key] = {str(d): _curve(origin, f"{key}.{d}", c) for d, c in _mapping(origin, key, data[key]).items()}
    for key in _SCALARS:
        if key in data:
            out[key] = _number(origin, key, data[key], positive=True, hi=1.5)
    for key in _GAPS:
        if key in data:
            out[key] = _number(origin, key, data[key], lo=0.0, hi=10.0)
    if "kernels" in data:
        kernels = _mapping(origin, "kernels", data["kernels"])
        for k, v in kernels.items():
            if v not in _KERNEL_STATES:
                raise ConfigError(f"{origin}: kernels.{k} must be one of {', '.join(_KERNEL_STATES)}, got {v!r}")
        out["kernels"] = dict(kernels)
    if "sm_sharing" in data:
        sm = _mapping(origin, "sm_sharing", data["sm_sharing"])
        extra = set(sm) - {"comm_sms", "fitted_slowdown", "model_slowdown", "samples"}
        if extra:
            raise ConfigError(f"{origin}: sm_sharing: unknown key {sorted(extra)[0]!r}")
        out["sm_sharing"] = {k: _number(origin, f"sm_sharing.{k}", v, lo=0.0) for k, v in sm.items()}
    if "comm" in data:
        from sim.comm import CommCosts  # noqa: PLC0415  (sim.comm pulls networkx; only when needed)

        comm = {}
        for k, v in _mapping(origin, "comm", data["comm"]).items():
            if k not in CommCosts.__dataclass_fields__:
                raise ConfigError(f"{origin}: comm.{k} is not a CommCosts field")
            if k not in CommCosts.scalar_fields():  # a table (by SMs, by EP size)
                raise ConfigError(f"{origin}: comm.{k} is a table of CommCosts; a calibration overrides only its "
                                  f"scalar fields (got {_short(v)})")
            comm[k] = _number(origin, f"comm.{k}", v, lo=0.0)
            if problem := CommCosts.scalar_problem(k, comm[k]):
                raise ConfigError(f"{origin}: comm.{problem}, got {_short(v)}")
        out["comm"] = comm
    if "comm_rates" in data:
        rates = {}
        for kind, row in _mapping(origin, "comm_rates", data["comm_rates"]).items():
            rates[str(kind)] = _numbers_table(origin, f"comm_rates.{kind}", row, lo=0.0)
        out["comm_rates"] = rates
    if "stack_efficiency" in data:
        se: dict[str, dict[str, float]] = {}
        for arch, table in _mapping(origin, "stack_efficiency", data["stack_efficiency"]).items():
            row = _numbers_table(origin, f"stack_efficiency.{arch}", table, positive=True, hi=1.5)
            for cls in row:
                if cls != "default" and cls not in OP_CLASSES:
                    raise ConfigError(f"{origin}: stack_efficiency.{arch}.{cls} is not an op class "
                                      f"(known: {', '.join(OP_CLASSES)})")
            se[str(arch)] = row
        out["stack_efficiency"] = se
    if "op_seconds" in data:
        out["op_seconds"] = _numbers_table(origin, "op_seconds", data["op_seconds"], lo=0.0)
    if "device_spec" in data:
        spec = _mapping(origin, "device_spec", data["device_spec"])
        dev: dict[str, Any] = {}
        for k, v in spec.items():
            if k not in _DEVICE_FIELDS:
                raise ConfigError(f"{origin}: device_spec.{k} is not a GPU field (known: {', '.join(_DEVICE_FIELDS)})")
            if _DEVICE_FIELDS[k] in (str, bool):
                field_type = _DEVICE_FIELDS[k]
                if not isinstance(v, field_type):
                    raise ConfigError(f"{origin}: device_spec.{k} must be a {'string' if field_type is str else 'boolean'}, "
                                      f"got {_short(v)}")
                dev[k] = v
            elif k in _DEVICE_ZERO_OK:
                dev[k] = _number(origin, f"device_spec.{k}", v, lo=0.0)
            else:
                dev[k] = _number(origin, f"device_spec.{k}", v, positive=True)
                if _DEVICE_FIELDS[k] is int and dev[k] != int(dev[k]):
                    raise ConfigError(f"{origin}: device_spec.{k} must be a whole number, got {_short(v)}")
        out["device_spec"] = dev
    if "residuals" in data:
        out["residuals"] = {str(k): _numbers_table(origin, f"residuals.{k}", v)
                            for k, v in _mapping(origin, "residuals", data["residuals"]).items()}
    if "sources" in data:
        sources = _mapping(origin, "sources", data["sources"])
        for k, v in sources.items():
            if not isinstance(v, str):
                raise ConfigError(f"{origin}: sources.{k} must be a string, got {_short(v)}")
        out["sources"] = dict(sources)
    if "notes" in data:
        if not isinstance(data["notes"], list) or not all(isinstance(n, str) for n in data["notes"]):
            raise ConfigError(f"{origin}: notes must be a list of strings, got {_short(data['notes'])}")
        out["notes"] = list(data["notes"])
    return out


def _reject_constant(token: str) -> float:
    raise ValueError(f"{token} is not a number JSON allows")


def parse_calibration(text: str | bytes, origin: str = "calibration") -> Calibration:
    """Validate a calibration document (JSON text); raises :class:`ConfigError` naming the field."""
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ConfigError(f"{origin}: malformed JSON: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise ConfigError(f"{origin}: malformed JSON: {err}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{origin}: expected a JSON object, got {type(data).__name__}")
    if _depth(data, MAX_NESTING) > MAX_NESTING:
        raise ConfigError(f"{origin}: nested deeper than {MAX_NESTING} levels")
    if data.get("schema") != SCHEMA or data.get("version") != VERSION:
        if "schema" not in data and data.get("version") == 1:
            raise ConfigError(f"{origin}: version 1 (a bare CostModel) is not a calibration file; "
                              f"this moesim reads {SCHEMA} version {VERSION}")
        if data.get("schema") not in (SCHEMA, None):
            raise ConfigError(f"{origin}: schema {data.get('schema')!r} is not {SCHEMA!r}")
        raise ConfigError(f"{origin}: version {data.get('version')!r} is not supported "
                          f"(this moesim reads {SCHEMA} version {VERSION})")
    unknown = [k for k in data if k not in _TOP]
    if unknown:
        raise ConfigError(f"{origin}: unknown key {unknown[0]!r}")
    for key in ("name", "gpu"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise ConfigError(f"{origin}: {key} must be a non-empty string, got {_short(data.get(key))}")
    prov = _mapping(origin, "provenance", data.get("provenance"))
    for k, v in prov.items():
        if k not in _PROVENANCE_KEYS:
            raise ConfigError(f"{origin}: provenance.{k} is not a provenance field (known: {', '.join(_PROVENANCE_KEYS)})")
        if k == "sources":
            if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
                raise ConfigError(f"{origin}: provenance.sources must be a list of strings, got {_short(v)}")
        elif v is not None and not isinstance(v, str):
            raise ConfigError(f"{origin}: provenance.{k} must be a string or null, got {_short(v)}")
    return Calibration(data["name"], data["gpu"], dict(prov), _validate_tables(data, origin), origin)


def bundled_path(name: str) -> Path:
    """The file of a calibration shipped with moesim (``h800-deepseek-trace`` ...)."""
    return Path(__file__).parent / "calibrations" / f"{name}.json"


def load_calibration(path_or_name: str | Path) -> Calibration:
    """Read and validate a calibration file, or a bundled one by name (see :data:`BUNDLED`)."""
    path = Path(path_or_name)
    if str(path_or_name) in BUNDLED:
        path = bundled_path(str(path_or_name))
    from sim.fileio import read_input

    raw = read_input(path, "calibration file")  # a regular file, size-bounded (sim.limits.MAX_INPUT_MB)
    cal = parse_calibration(raw, str(path))
    return Calibration(cal.name, cal.gpu, cal.provenance, cal.tables, str(path))


def device_gpu_spec(cal: Calibration) -> Any:
    """The :class:`~sim.specs.GPUSpec` a calibration's rates belong to: its ``device_spec`` if it has one,
    else the catalog GPU ``cal.gpu``."""
    from sim.catalog import load_gpu
    from sim.specs import GPUSpec

    spec = cal.tables.get("device_spec")
    if not spec:
        return load_gpu(cal.gpu)
    fields = dict(spec)
    fields.setdefault("name", cal.gpu)
    missing = [k for k in ("bf16_flops", "fp8_flops", "hbm_bw_bytes_per_s") if k not in fields]
    if missing:
        raise ConfigError(f"{cal.path or cal.name}: device_spec lacks {', '.join(missing)}")
    fields.setdefault("hbm_bytes", 1e12)
    fields.setdefault("num_sms", 1)
    fields.setdefault("nvlink_bw_bytes_per_s", fields["hbm_bw_bytes_per_s"])
    fields.setdefault("arch", "cpu")
    fields["num_sms"] = int(fields["num_sms"])
    return GPUSpec(**fields)


def to_cost_model(cal: Calibration, gpu: Any = None) -> Any:
    """A :class:`~sim.costs.CostModel` with the calibration's tables over moesim's defaults for ``gpu``.

    Rates in a calibration are what the kernels achieved (already in training where the source was a
    training trace); the framework's launch and host gaps are in :func:`calibration_stack`.
    """
    import dataclasses

    from sim.costs import Curve, default_costs

    gpu = gpu if gpu is not None else device_gpu_spec(cal)
    base = default_costs(gpu)
    t = cal.tables

    def curves(key: str) -> dict[str, Curve]:
        measured = {d: Curve(tuple(c["sizes"]), tuple(c["values"])) for d, c in t.get(key, {}).items()}
        # A measured FP8 curve is what that source's FP8 GEMMs ran at (DeepSeek's trace: its blockwise DeepGEMM):
        # it replaces the defaults' FP8 variants too, unless the calibration measured those as well.
        kept = {d: c for d, c in getattr(base, key).items()
                if not ("fp8" in measured and d.startswith("fp8-") and d not in measured)}
        return {**kept, **measured}

    def attn_top(phase: str, default: float) -> float:
        """The measured attention efficiency at the largest size profiled (the cost model's scalar)."""
        curve = t.get("attn_eff", {}).get(phase)
        return float(curve["values"][-1]) if curve else default

    sources = {**base.sources, **t.get("sources", {})}
    return dataclasses.replace(
        base, gemm_eff=curves("gemm_eff"), grouped_gemm_eff=curves("grouped_gemm_eff"),
        attn_fwd_eff=t.get("attn_fwd_eff", attn_top("fwd", base.attn_fwd_eff)),
        attn_bwd_eff=t.get("attn_bwd_eff", attn_top("bwd", base.attn_bwd_eff)),
        mem_bw_eff=t.get("mem_bw_eff", base.mem_bw_eff), quantize_bw_eff=t.get("quantize_bw_eff", base.quantize_bw_eff),
        comm=dict(t.get("comm", {})), sources=sources,
        provenance=f"calibration {cal.name}: {cal.provenance.get('method', '')}")


#: Tables that become costs, and where (:func:`calibrated_inputs`): the kernel rates and the network
#: overrides go into the :class:`~sim.costs.CostModel`; ``stack_efficiency`` (pass ratios the fit measured,
#: e.g. the FP8 wgrad against the forward) multiplies the stack's efficiency on the calibrated architecture;
#: the launch gap and the host sync are the stack's own where the calibration measured that stack.
COST_TABLES = ("gemm_eff", "grouped_gemm_eff", "attn_fwd_eff", "attn_bwd_eff", "attn_eff", "mem_bw_eff",
               "quantize_bw_eff", "comm", "stack_efficiency", "launch_overhead_s", "host_sync_s")
#: Tables a calibration carries that are not costs of a prediction: what was measured and how well it
#: fits (``residuals``, ``sources``, ``kernels``, ``device_spec``: the device itself), and the trace's own
#: per-kernel readings that ``moesim calibrate compare`` replays (``comm_rates``: in-training rates of one
#: regime; ``op_seconds``: memory-bound kernels the trace gives no shapes for; ``sm_sharing``: the fitted
#: slowdown of compute beside communication). A prediction models those from mechanisms, never from
#: one trace's readings, so they are reported, not applied.
INFORMATION_TABLES = ("kernels", "residuals", "sources", "device_spec", "comm_rates", "op_seconds", "sm_sharing",
                      "notes")


def calibrated_inputs(cal: Calibration, gpu: Any, stack: Any) -> tuple[Any, Any]:
    """The one path from a calibration to a prediction's inputs: ``(CostModel, StackProfile)`` for
    ``gpu`` and ``stack`` (a :class:`~sim.stacks.StackProfile`), every table of :data:`COST_TABLES` applied.
    ``predict --calibration`` and ``calibrate compare`` both go through it.

    >>> from sim.catalog import load_gpu
    >>> from sim.stacks import load_stack
    >>> cal = load_calibration("h800-deepseek-trace")
    >>> costs, stack = calibrated_inputs(cal, load_gpu("h800"), load_stack("deepseek"))
    >>> round(stack.eff("sm90", "gemm.wgrad") / load_stack("deepseek").eff("sm90", "gemm.wgrad"), 4)
    0.7691
    """
    costs = to_cost_model(cal, gpu)
    t = cal.tables
    ratios = t.get("stack_efficiency", {}).get(getattr(gpu, "arch", ""), {})
    changes: dict[str, Any] = {}
    if ratios:
        arch = gpu.arch
        table = {**{k: float(v) for k, v in stack.efficiency.get(arch, {}).items()}}
        for op_class, ratio in ratios.items():
            table[op_class] = stack.eff(arch, op_class) * float(ratio)
        changes["efficiency"] = {**stack.efficiency, arch: table}
    if STACK_CALIBRATIONS.get(stack.name) == cal.name:  # the calibration measured this stack's host gaps
        for key, fname in (("launch_overhead_s", "kernel_overhead_s"), ("host_sync_s", "host_sync_s")):
            if key in t:
                changes[fname] = float(t[key])
    return costs, (dataclasses.replace(stack, **changes) if changes else stack)


def default_inputs(gpu: GPUSpec, stack: StackProfile) -> tuple[CostModel, StackProfile]:
    """The kernel costs and stack a prediction takes when the user names no calibration: the stack's own
    bundled calibration when it was measured on ``gpu`` (``deepseek`` on h800: DeepSeek's trace,
    :data:`STACK_CALIBRATIONS`), else moesim's datasheet-and-microbenchmark defaults and the stack as it is.
    ``sim.predict.predict`` and ``moesim predict`` both take this path, so they give the same number.

    >>> from sim.catalog import load_gpu
    >>> from sim.stacks import load_stack
    >>> default_inputs(load_gpu("h800"), load_stack("deepseek"))[0].provenance.startswith("moesim defaults")
    False
    >>> default_inputs(load_gpu("b200"), load_stack("deepseek"))[0].provenance.startswith("moesim defaults")
    True
    """
    cal = stack_calibration(gpu, stack)
    if cal is not None:
        return calibrated_inputs(cal, gpu, stack)
    return _default_costs(gpu), stack


def stack_calibration(gpu: GPUSpec, stack: StackProfile) -> Calibration | None:
    """The stack's own bundled calibration (:data:`STACK_CALIBRATIONS`) when it was measured on ``gpu``, else None."""
    name = STACK_CALIBRATIONS.get(stack.name)
    if name is None:
        return None
    cal = load_calibration(name)
    return cal if cal.gpu == gpu.name else None


@functools.cache
def _default_costs(gpu: GPUSpec) -> CostModel:
    from sim.costs import default_costs

    return default_costs(gpu)


def calibration_stack(cal: Calibration) -> Any:
    """The stack that ran the calibrated kernels: efficiency 1.0 against the calibration's own rates (they
    are what that stack achieved), with the calibration's launch and host-sync gaps where it has them."""
    from sim.stacks import StackProfile

    t, default = cal.tables, StackProfile()
    return StackProfile(name=f"calibration:{cal.name}",
                        kernel_overhead_s=float(t.get("launch_overhead_s", default.kernel_overhead_s)),
                        host_sync_s=float(t.get("host_sync_s", default.host_sync_s)),
                        provenance=f"calibration {cal.name} ({cal.provenance.get('method', '')})")
