"""Capacity sweeps: every point of a spec searched for its fastest plan, results appended as they finish.

:func:`run_sweep` expands a :class:`~studies.capacity_spec.CapacitySpec` into points, skips the points
already in the results table (a killed sweep resumes where it stopped), searches the rest over every
core (``executor="process"``, or ``"ray"`` on a Ray cluster: the optional ``ray`` extra) and appends one
CSV row per point the moment it finishes (:func:`sim.fileio.append_line_durably`, from the parent
process only), so the table ends with every point exactly once.

>>> from studies.capacity_spec import spec_from_mapping
>>> spec = spec_from_mapping({"sweep": [{"models": ["deepseek-v3-16b"], "gpus": ["b200"],
...                                      "gpu_counts": [64]}]})
>>> row = run_point(spec.points()[0], spec)
>>> row["status"], row["tokens_per_s_per_gpu"] > 0
('ok', True)
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

from sim.catalog import load_cluster, load_model
from sim.errors import ConfigError
from sim.fileio import append_line_durably, read_input, write_atomic
from sim.specs import ClusterSpec
from studies._sim import interval_for, memory_fits
from studies.capacity_spec import CLUSTER_TEMPLATE, NVLINK_DOMAINS, CapacitySpec, Point
from studies.folder_lock import folder_lock
from studies.report import ensure_dir
from studies.search import check_space, enumerate_plans, search
from studies.workers import Interrupted, WorkerPool, critical, interrupt_signals

__all__ = [
    "COLUMNS",
    "TEXT_COLUMNS",
    "SweepInterrupted",
    "check_counts_fit",
    "point_cluster",
    "read_results",
    "run_point",
    "run_sweep",
]


class SweepInterrupted(Interrupted):
    """A sweep stopped by SIGINT or SIGTERM after recording every finished point: ``recorded`` of
    ``total`` points are in ``table``; running the same sweep again resumes it."""

    def __init__(self, signum: int, recorded: int, total: int, table: Path) -> None:
        super().__init__(signum)
        self.recorded, self.total, self.table = recorded, total, table

COLUMNS = ["point_id", "model", "gpu", "n_gpus", "nic_gbps", "nvlink_domain", "oversubscription", "precision",
           "ep_backend", "stack", "seq_len", "global_batch", "status", "tp", "pp", "pp_schedule", "vpp", "ep",
           "ac", "micro_batch", "tokens_per_s_per_gpu", "step_time_s", "tflops_per_gpu", "mfu",
           "peak_memory_gib", "interval_low", "interval_high", "time_to_train_days", "cost_usd",
           "plans_enumerated", "plans_valid", "plans_fit", "plans_evaluated", "plans_pruned", "search_s"]


def point_cluster(point: Point) -> ClusterSpec:
    """The cluster of ``point``: its GPU's template sized to ``n_gpus`` with its fabric options."""
    cluster = load_cluster(CLUSTER_TEMPLATE[point.gpu], n_gpus=point.n_gpus, gpu=point.gpu)
    changes: dict[str, Any] = {}
    if point.nic_gbps:
        changes["nic_bw_bytes_per_s"] = point.nic_gbps * 1e9 / 8
    domain = NVLINK_DOMAINS[point.nvlink_domain]
    if domain:
        changes["nvlink_domain_gpus"] = domain
    if point.oversubscription != 1.0:
        changes["fabric"] = dataclasses.replace(cluster.fabric, leaf_oversubscription=point.oversubscription)
    return dataclasses.replace(cluster, **changes) if changes else cluster


def run_point(point: Point, spec: CapacitySpec) -> dict[str, Any]:
    """Search ``point``'s plan space; one results row (``status`` ok, no-fit or no-valid-plan)."""
    t0 = time.perf_counter()
    model, cluster = load_model(point.model), point_cluster(point)
    result = search(model, cluster, spec.space_for(point), point.stack, keep=1)
    row: dict[str, Any] = {k: v for k, v in dataclasses.asdict(point).items()}
    row["point_id"] = point.point_id
    c = result.counts
    row.update(plans_enumerated=c["enumerated"], plans_valid=c["valid"], plans_fit=c["fits"],
               plans_evaluated=c["evaluated"], plans_pruned=c["pruned"])
    if result.best is None:
        if c["valid"] == 0:
            top = max(result.reasons.items(), key=lambda kv: kv[1])[0] if result.reasons else "no plan"
            row["status"] = f"no valid plan ({top})"
        else:
            row["status"] = "no plan fits in memory"
    else:
        plan, pred = result.best.plan, result.best.prediction
        row["status"] = "ok"
        row.update(tp=plan.tp, pp=plan.pp, pp_schedule=plan.pp_schedule, vpp=plan.vpp, ep=plan.ep, ac=plan.ac,
                   micro_batch=plan.micro_batch, tokens_per_s_per_gpu=round(pred.tokens_per_s_per_gpu, 3),
                   step_time_s=round(pred.step_time_s, 6), tflops_per_gpu=round(pred.tflops_per_gpu, 3),
                   mfu=round(pred.mfu, 5), peak_memory_gib=round(pred.peak_memory_bytes / 2**30, 2))
        interval = interval_for(pred, point.stack)
        if interval:
            row["interval_low"], row["interval_high"] = round(interval[0], 3), round(interval[1], 3)
        days = spec.tokens / (pred.tokens_per_s_per_gpu * point.n_gpus) / 86400
        row["time_to_train_days"] = round(days, 4)
        price = spec.price(point.gpu)
        if price is not None:
            row["cost_usd"] = round(days * 24 * point.n_gpus * price, 0)
    row["search_s"] = round(time.perf_counter() - t0, 3)
    return row


def _csv_line(row: dict[str, Any]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(["" if row.get(k) is None else row.get(k, "") for k in COLUMNS])
    return buf.getvalue()


#: The columns that hold text; every other column holds a number, or nothing where the point has no plan.
TEXT_COLUMNS = frozenset({"point_id", "model", "gpu", "nvlink_domain", "precision", "ep_backend", "stack", "status",
                          "pp_schedule", "ac"})
#: The columns every point with a plan (status "ok") fills.
OK_COLUMNS = ("n_gpus", "seq_len", "global_batch", "tp", "pp", "pp_schedule", "vpp", "ep", "ac", "micro_batch",
              "tokens_per_s_per_gpu", "step_time_s", "mfu", "time_to_train_days")
#: The number columns that hold whole numbers.
INT_COLUMNS = frozenset({"n_gpus", "seq_len", "global_batch", "tp", "pp", "vpp", "ep", "micro_batch", "plans_enumerated",
                         "plans_valid", "plans_fit", "plans_evaluated", "plans_pruned"})


def _table_text(path: Path) -> str:
    """The text of a results table: a regular file (:func:`sim.fileio.read_input`: a FIFO or a device is refused
    without waiting on it) of UTF-8 text; a ConfigError naming it otherwise."""
    try:
        return read_input(path, "capacity results table").decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a moesim capacity results table (not UTF-8 text)") from None


def _check_header(path: Path, text: str) -> None:
    header = text.split("\n", 1)[0].rstrip("\r")
    if header != ",".join(COLUMNS):
        raise ConfigError(f"{path}: not a moesim capacity results table (columns differ)")


def read_results(path: str | Path) -> list[dict[str, str]]:
    """Rows of a results table (a final line without its newline, cut by a crash, is dropped); a ConfigError
    naming the file, the line and the column for a table this module did not write (other columns, a number
    column that holds text)."""
    path = Path(path)
    text = _table_text(path)
    if not text:
        return []
    _check_header(path, text)
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    rows = list(csv.DictReader(io.StringIO(text)))
    for line, row in enumerate(rows, start=2):
        if None in row or any(value is None for value in row.values()):
            raise ConfigError(f"{path}: line {line}: {len(COLUMNS)} columns expected")
        missing = [c for c in OK_COLUMNS if row["status"] == "ok" and not row[c]]
        if missing:
            raise ConfigError(f"{path}: line {line}: a point with a plan (status ok) has no {missing[0]}")
        for column in COLUMNS:
            value = row[column]
            if column in INT_COLUMNS and value and not (value.isascii() and value.isdigit()):
                raise ConfigError(f"{path}: line {line}: {column} must be a whole number, got {value[:40]!r}")
            if column not in TEXT_COLUMNS and value and not _is_finite_number(value):
                raise ConfigError(f"{path}: line {line}: {column} must be a number, got {value[:40]!r}")
    return rows


def _is_finite_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _prepare_table(path: Path, ids: set[str]) -> set[str]:
    """Create the table (header) or repair its tail; the ids of the points it already holds. A table that is not
    this module's is refused before anything is written to it."""
    if not path.exists() and not path.is_symlink():
        write_atomic(path, ",".join(COLUMNS) + "\n")
        return set()
    text = _table_text(path)
    if not text:
        write_atomic(path, ",".join(COLUMNS) + "\n")
        return set()
    rows = read_results(path)  # checks the header and every whole row first
    if not text.endswith("\n"):  # a crash mid-append: drop the partial line before appending again
        write_atomic(path, text[: text.rfind("\n") + 1])
    done = {r["point_id"] for r in rows}
    foreign = sorted(done - ids)
    if foreign:
        raise ConfigError(f"{path}: holds {len(foreign)} point(s) that are not in this spec (e.g. {foreign[0]!r}); "
                          "use another --out folder or the spec that wrote it")
    return done


def check_counts_fit(spec: CapacitySpec) -> None:
    """Raise :class:`ConfigError` for a (model, GPU count) of the spec on which no plan of the search space
    fits in memory on any of the spec's GPU types (a sweep row for it could only say "nothing fits")."""
    by_pair: dict[tuple[str, int], list[Point]] = {}
    for p in spec.points():
        by_pair.setdefault((p.model, p.n_gpus), []).append(p)
    for (model_name, n), points in by_pair.items():
        model = load_model(model_name)
        seen: set[tuple[str, str, str]] = set()
        fits = runs = False
        reasons: dict[str, int] = {}
        for p in points:
            key = (p.gpu, p.precision, p.ep_backend)
            if key in seen:
                continue
            seen.add(key)
            cluster = point_cluster(p)
            for plan in enumerate_plans(model, cluster, spec.space_for(p), reasons):
                runs = True
                if memory_fits(model, cluster, plan, p.stack):
                    fits = True
                    break
            if fits:
                break
        if not fits:
            gpus = ", ".join(sorted({p.gpu for p in points}))
            why = ("no plan of the search space fits it in memory" if runs or not reasons else
                   f"no plan of the search space can run (most often: {max(reasons, key=reasons.__getitem__)})")
            raise ConfigError(f"{spec.source}: gpu_counts {n}: {model_name} on {n} GPUs of any listed type "
                              f"({gpus}): {why}; drop the count or widen [search]")


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs the optional ray extra: pip install 'moesim[ray]'") from None
    return ray


def _ray_results(todo: list[Point], spec: CapacitySpec, workers: int) -> Iterable[dict[str, Any]]:
    ray = _import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        address = os.environ.get("RAY_ADDRESS")
        ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                 log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    try:
        remote = ray.remote(run_point)
        pending = [remote.remote(p, spec) for p in todo]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            yield ray.get(ready[0])
    finally:
        if started_here:
            ray.shutdown()


def run_sweep(spec: CapacitySpec, out_dir: str | Path, *, workers: int | None = None, executor: str = "process",
              progress: Callable[[int, int], None] | None = None, limit: int | None = None) -> Path:
    """Run (or resume) ``spec`` into ``out_dir/results.csv``; returns its path.

    ``workers``: processes (default: every core). ``limit``: stop after that many new points (tests).

    One sweep at a time per folder (:func:`studies.folder_lock.folder_lock`; a second one raises
    :class:`ConfigError` naming the holder's PID). SIGINT and SIGTERM (in the main thread) stop it: pending
    points are dropped, every finished point is recorded, the workers are ended, and
    :class:`SweepInterrupted` says how many points the table holds."""
    if executor not in ("process", "ray"):
        raise ConfigError(f"--executor must be process or ray, got {executor!r}")
    if executor == "ray":
        _import_ray()  # before anything is written: a sweep that cannot run leaves no folder and no table
    points = spec.points()
    for point in {(p.stack, p.precision, p.ep_backend): p for p in points}.values():
        try:  # a precision or backend a point's stack cannot run: one line, before anything is written
            check_space(spec.space_for(point), point.stack)
        except ConfigError as err:
            raise ConfigError(f"{spec.source}: {err}") from None
    check_counts_fit(spec)  # before anything is written: a bad spec leaves no folder and no table
    out = ensure_dir(out_dir)
    table = out / "results.csv"
    with folder_lock(out), interrupt_signals():
        done = _prepare_table(table, {p.point_id for p in points})
        todo = [p for p in points if p.point_id not in done]
        if limit is not None:
            todo = todo[:limit]
        workers = workers or os.cpu_count() or 1
        total, count = len(points), len(done)
        if progress:
            progress(count, total)

        def record(row: dict[str, Any]) -> None:
            nonlocal count
            with critical():  # a signal waits until the line is whole and counted
                append_line_durably(table, _csv_line(row))
                count += 1
            if progress:
                progress(count, total)

        try:
            if executor == "ray":
                for row in _ray_results(todo, spec, workers):
                    record(row)
            elif workers == 1 or len(todo) <= 1:
                for p in todo:
                    record(run_point(p, spec))
            else:
                _pool_run(todo, spec, min(workers, len(todo)), record)
        except Interrupted as err:
            raise SweepInterrupted(err.signum, count, total, table) from None
    return table


def _pool_run(todo: list[Point], spec: CapacitySpec, workers: int, record: Callable[[dict[str, Any]], None]) -> None:
    """Run ``todo`` on ``workers`` processes, ``record`` each row as it arrives; on any exception (an
    interrupt included) record the rows that already arrived, then end the workers and re-raise."""
    with WorkerPool(partial(run_point, spec=spec), workers) as pool:
        pending = iter(todo)
        try:
            while True:
                while pool.idle and (point := next(pending, None)) is not None:
                    pool.submit(point.point_id, point)
                if not pool.busy:
                    return
                for _, row in pool.collect():
                    record(row)
        except BaseException:
            with critical():
                for _, row in pool.ready(errors=False):
                    record(row)
            raise
