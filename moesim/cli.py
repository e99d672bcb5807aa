"""The ``moesim`` command: a thin layer over the library.

Subcommands: ``catalog`` (what is built in), ``show`` (a model's accounting), ``predict`` (the
simulator), ``reference`` (runs ``python -m reference.run``; the simulator never imports it).
User errors print one line, ``moesim: error: ...``, and exit with code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import typing
from collections.abc import Callable, Sequence
from typing import Any

from moesim.argtypes import gpu_count, plan_int
from moesim.calibrate_cmd import add_calibrate_parser
from moesim.compare_cmd import add_compare
from moesim.plan_cmd import add_plan
from moesim.study_cmd import add_study
from moesim.validate_cmd import add_validate
from moesim.validate_reference_cmd import add_validate_reference_parser
from sim.accounting import (
    count_params,
    exact_flops_per_token,
    memory_per_gpu,
    torchtitan_flops_per_token,
)
from sim.catalog import (
    cluster_names,
    gpu_names,
    load_cluster,
    load_gpu,
    load_model,
    model_names,
)
from sim.errors import ConfigError, MoesimError
from sim.loaders import load_plan_file
from sim.specs import ParallelPlan

__all__ = ["main", "build_parser", "model_summary", "OneLineParser"]

EXIT_USAGE = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in moesim, not in the input
GIB = float(1 << 30)
EPILOG = """exit codes: 0 success, 1 a negative answer printed on stdout (validate: errors over the threshold; plan: no
cluster in the range trains it), 2 bad input (one line naming the field), 70 internal error (a bug: one line with the
failing file:line), 128+N stopped by signal N (study capacity: finished points kept).
environment: MOESIM_DEBUG=1 shows the full Python traceback of an internal error instead of one line;
MOESIM_MAX_INPUT_MB, MOESIM_MAX_TRACE_MB, MOESIM_MAX_TRACE_EVENTS, MOESIM_MAX_TRACE_MICROBATCHES,
MOESIM_MAX_CAPACITY_POINTS and MOESIM_MAX_WORKERS raise the input limits (sim/limits.py)."""


class _VersionAction(argparse.Action):
    """``--version``: the installed package's version, read only when asked (importlib.metadata is slow)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> typing.NoReturn:
        import moesim

        parser.exit(message=f"moesim {moesim.__version__}\n")


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line (``prog: error: ...; see prog --help``), exit 2."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def model_summary(name: str, seq_len: int) -> dict[str, Any]:
    """The accounting of catalog model (or model file) ``name`` at ``seq_len``, as a JSON-ready dict."""
    model = load_model(name)
    counts = count_params(model)
    return {
        "name": model.name,
        "source": model.source,
        "seq_len": seq_len,
        "params_total": counts.total,
        "params_active": counts.active,
        "params_embedding": counts.embedding,
        "params_mtp_not_counted": counts.mtp,
        "flops_per_token_torchtitan": torchtitan_flops_per_token(model, seq_len),
        "flops_per_token_exact": exact_flops_per_token(model, seq_len),
        "params": counts.as_dict(),
        "spec": {k: v for k, v in vars(model).items() if k not in ("name", "source")},
    }


def _plan_memory(model_name: str, plan: ParallelPlan, gpu_name: str, n_gpus: int | None,
                 stack_name: str | None = None) -> dict[str, Any]:
    from sim.stacks import load_stack

    model = load_model(model_name)
    gpu = load_gpu(gpu_name)
    plan.check_fits(model, n_gpus if n_gpus is not None else plan.world_size)
    stack = load_stack(stack_name)  # the memory predict reports: the stack's state widths and recompute
    stack.check_plan(plan)
    return memory_per_gpu(model, plan, gpu, stack).as_dict()


def _cmd_show(args: argparse.Namespace) -> int:
    plan = load_plan_file(args.plan) if args.plan else None
    if plan is not None and args.seq_len is not None and args.seq_len != plan.seq_len:
        raise ConfigError(f"--seq-len ({args.seq_len}) differs from the plan's seq_len ({plan.seq_len}) in {args.plan}")
    seq_len = args.seq_len or (plan.seq_len if plan is not None else ParallelPlan().seq_len)
    args.seq_len = seq_len
    summary = model_summary(args.model, seq_len)
    if plan is not None:
        summary["memory"] = _plan_memory(args.model, plan, args.gpu, args.gpus, getattr(args, "stack", None))
    if args.json:
        print(json.dumps(summary, indent=2, allow_nan=False))
        return 0
    print(f"{summary['name']}  ({summary['source']})")
    print(f"  parameters, total            {summary['params_total'] / 1e9:10.3f} B")
    print(f"  parameters, active per token {summary['params_active'] / 1e9:10.3f} B")
    print(f"  FLOPs/token, TorchTitan      {summary['flops_per_token_torchtitan']:10.4e}  (seq {args.seq_len})")
    print(f"  FLOPs/token, exact per-op    {summary['flops_per_token_exact']:10.4e}  (causal attention)")
    spec = summary["spec"]
    print(f"  layers {spec['n_layers']} ({spec['n_dense_layers']} dense), dim {spec['dim']}, heads {spec['n_heads']}, "
          f"experts {spec['n_routed_experts']} routed + {spec['n_shared_experts']} shared, top-{spec['top_k']}")
    if "memory" in summary:
        mem = summary["memory"]
        print(f"  memory per GPU on {args.gpu} (stack {getattr(args, 'stack', None) or 'torchtitan'}, "
              f"busiest pipeline rank {mem['pp_rank']}):")
        for key in ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                    "transient_bytes", "fsdp_unsharded_bytes", "reserve_bytes", "total_bytes", "capacity_bytes"):
            print(f"    {key.removesuffix('_bytes'):<15} {mem[key] / GIB:8.1f} GiB")
        print(f"    fits            {'yes' if mem['fits'] else 'NO'}")
    return 0


def _cmd_catalog(args: argparse.Namespace) -> int:
    kinds = [args.kind] if args.kind else ["models", "gpus", "clusters"]
    rows: dict[str, list[dict[str, Any]]] = {}
    if "models" in kinds:
        rows["models"] = []
        for name in model_names():
            model = load_model(name)
            counts = count_params(model)
            rows["models"].append({"name": name, "params_total_b": round(counts.total / 1e9, 2),
                                   "params_active_b": round(counts.active / 1e9, 2),
                                   "experts": model.n_routed_experts, "top_k": model.top_k,
                                   "source": model.source})
    if "gpus" in kinds:
        rows["gpus"] = []
        for name in gpu_names():
            gpu = load_gpu(name)
            rows["gpus"].append({"name": name, "bf16_tflops": gpu.bf16_flops / 1e12,
                                 "fp8_tflops": gpu.fp8_flops / 1e12, "hbm_gb": gpu.hbm_bytes / 1e9,
                                 "nvlink_gb_per_s": gpu.nvlink_bw_bytes_per_s / 1e9, "sms": gpu.num_sms,
                                 "mxfp8": gpu.mxfp8, "source": gpu.source})
    if "clusters" in kinds:
        rows["clusters"] = []
        for name in cluster_names():
            cluster = load_cluster(name)
            rows["clusters"].append({"name": name, "gpu": cluster.gpu.name, "n_gpus": cluster.n_gpus,
                                     "gpus_per_node": cluster.gpus_per_node,
                                     "nvlink_domain_gpus": cluster.nvlink_domain_gpus,
                                     "nic_gbps": cluster.nic_bw_bytes_per_s * 8 / 1e9,
                                     "nics_per_gpu": cluster.nics_per_gpu, "transport": cluster.fabric.transport,
                                     "source": cluster.source})
    if args.json:
        print(json.dumps(rows, indent=2, allow_nan=False))
        return 0
    for kind, items in rows.items():
        print(f"{kind}:")
        for item in items:
            fields = "  ".join(f"{k}={v}" for k, v in item.items() if k not in ("name", "source"))
            print(f"  {item['name']:<18} {fields}")
            print(f"  {'':<18} source: {item.get('source') or '-'}")
    return 0


def _run_reference(arguments: Sequence[str]) -> int:
    """``moesim reference ...`` is ``python -m reference.run ...`` (a subprocess: sim never imports torch), in
    its own process group: SIGINT/SIGTERM/SIGHUP reach it and every rank it started (:mod:`moesim.launch`)."""
    from moesim.launch import run_group

    return run_group([sys.executable, "-m", "reference.run", *arguments])


def _add_predict(subparsers: Any) -> None:
    parser = subparsers.add_parser("predict", help="predict step time, throughput, MFU and memory",
                                   description="Predict one training step; no arguments runs the seed scenario.")
    try:
        from moesim.predict_cmd import add_predict_arguments, run_predict
    except ImportError:  # the simulator's command is not built yet in this checkout
        parser.set_defaults(handler=lambda _args: _missing_predict())
        return
    add_predict_arguments(parser)
    parser.set_defaults(handler=run_predict)


def _missing_predict() -> int:
    raise MoesimError("the simulator is not installed in this build (moesim.predict_cmd missing)")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="moesim", description=__doc__.splitlines()[0], epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_VersionAction, help="show moesim's version and exit")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    catalog = subparsers.add_parser("catalog", help="list the built-in models, GPUs and cluster templates")
    catalog.add_argument("kind", nargs="?", choices=["models", "gpus", "clusters"])
    catalog.add_argument("--json", action="store_true", help="print JSON")
    catalog.set_defaults(handler=_cmd_catalog)

    show = subparsers.add_parser("show", help="a model's parameters and FLOPs per token")
    show.add_argument("model", help="catalog name, HuggingFace config.json, or model TOML")
    show.add_argument("--seq-len", type=plan_int("seq_len"), default=None,
                      help=f"sequence length (default: the plan's, else {ParallelPlan().seq_len}, as moesim predict)")
    show.add_argument("--plan", help="a parallel-plan TOML: also show per-GPU memory under it")
    show.add_argument("--gpu", default="b200", help="GPU for --plan memory (default b200)")
    show.add_argument("--gpus", type=gpu_count(), help="GPU count for --plan (default: the plan's world size)")
    show.add_argument("--stack", help="framework stack profile for --plan memory, as in predict (default torchtitan)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_cmd_show)

    _add_predict(subparsers)
    add_calibrate_parser(subparsers)
    add_validate_reference_parser(subparsers)
    add_validate(subparsers)
    add_study(subparsers)
    add_plan(subparsers)
    add_compare(subparsers)

    reference = subparsers.add_parser("reference", help="run the PyTorch reference layer (python -m reference.run)",
                                      add_help=False)
    reference.add_argument("reference_args", nargs=argparse.REMAINDER)
    reference.set_defaults(handler=lambda args: _run_reference(args.reference_args))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``moesim`` console script; returns the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["reference"]:  # everything after it belongs to the reference's own parser
        return _run_reference(arguments[1:])
    parser = build_parser()
    args = parser.parse_args(arguments)
    handler: Callable[[argparse.Namespace], int] = args.handler
    dashes = [f"--{name.replace('_', '-')} -" for name in _FILE_OUTPUTS if getattr(args, name, None) == "-"]
    if len(dashes) > 1 or (dashes and getattr(args, "json", False) is True):
        clash = " and ".join(dashes + (["--json"] if getattr(args, "json", False) is True else []))
        print(f"moesim: error: {clash} would each write a document to standard output; give all but one a file",
              file=sys.stderr)
        return EXIT_USAGE
    stdout = sys.stdout
    # user names cannot drive the terminal; with a ``-`` output the report goes to stderr, the file alone to stdout
    sys.stdout = _SafeText(stdout, sys.stderr if dashes else None)
    try:
        if hasattr(sys.stderr, "reconfigure"):
            sys.stderr.reconfigure(errors="backslashreplace")
        return _handle(handler, args)
    finally:
        sys.stdout = stdout


_FILE_OUTPUTS = ("trace", "sim_trace", "out")
"""Arguments that name an output file, where ``-`` is standard output (:func:`sim.fileio.write_atomic`)."""


class _SafeText:
    """A text stream that writes :func:`terminal_safe` text to ``report`` (default: ``stream``); bytes
    (``.buffer``: the ``-`` outputs of :func:`sim.fileio.write_atomic`) and every other attribute go to
    ``stream``."""

    def __init__(self, stream: Any, report: Any = None) -> None:
        self._stream = stream
        self._report = stream if report is None else report

    def write(self, text: str) -> int:
        self._report.write(terminal_safe(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _handle(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run ``handler``; a user error is one line and exit 2, a bug one line with its location and exit 70."""
    try:
        return handler(args)
    except MoesimError as err:
        print(f"moesim: error: {_one_line(str(err))}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return 0
    except OSError as err:  # an output or input path the user gave (read-only, missing folder, full disk)
        where = f"{err.filename}: " if err.filename else ""
        print(f"moesim: error: {_one_line(f'{where}{err.strerror or err}')}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # a bug: one line and where, not a traceback (MOESIM_DEBUG=1 re-raises)
        if os.environ.get("MOESIM_DEBUG") == "1":
            raise
        try:
            print(f"moesim: internal error (a bug, please report it): {type(err).__name__}: "
                  f"{_one_line(_safe_str(err))[:500]} at {_location(err)}; rerun with MOESIM_DEBUG=1 for the "
                  "full traceback", file=sys.stderr)
        except Exception:  # noqa: BLE001 - the report itself must never raise
            pass
        return EXIT_INTERNAL


def _safe_str(err: BaseException) -> str:
    """``str(err)``, or a placeholder when that itself fails (a huge int, a broken ``__str__``)."""
    try:
        return str(err)
    except Exception:  # noqa: BLE001 - any failure of a foreign __str__
        return "(message not printable)"


def _location(err: BaseException) -> str:
    """``file:line in function`` of the innermost frame of ``err``'s traceback (the failing line)."""
    tb = err.__traceback__
    if tb is None:
        return "an unknown location"
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    path = code.co_filename
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if path.startswith(root + os.sep):
        path = os.path.relpath(path, root)
    return f"{path}:{tb.tb_lineno} in {code.co_name}"


def _one_line(text: str) -> str:
    """``text`` on one line, terminal-safe: control characters and lone surrogates escaped."""
    return " ".join(terminal_safe(text).split())


def terminal_safe(text: str) -> str:
    r"""``text`` with control characters (but tab and newline) and lone surrogates escaped, so a user's
    name cannot move the cursor or crash the encoder of the terminal.

    >>> terminal_safe("a\x1b[2Jb\udcff")
    'a\\x1b[2Jb\\udcff'
    """
    out = []
    for ch in text:
        code = ord(ch)
        if ch in "\t\n" or (code >= 0x20 and code != 0x7F and not 0x80 <= code < 0xA0 and not 0xD800 <= code < 0xE000):
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape", "backslashreplace").decode("ascii")
                       if not 0xD800 <= code < 0xE000 else f"\\u{code:04x}")
    return "".join(out)


if __name__ == "__main__":
    sys.exit(main())
