"""Shared test setup: quiet TorchAO's GPU-library loading, and a CI switch that turns skips into failures.

`.ci/run` sets MOESIM_CI=1: a test that would skip for a missing tool (not for missing GPU hardware)
fails instead, so CI never passes by skipping.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CI = os.environ.get("MOESIM_CI") == "1"
HARDWARE_MARKERS = ("gpu", "multigpu", "sm100")
CI_REQUIRED_MODULES = ("torch", "torchao", "hypothesis", "simpy", "networkx", "plotly", "ruff", "mypy")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under CI every tool the test route installs must import: a missing one fails the run."""
    if not CI or os.environ.get("MOESIM_CI_SKIP_TOOL_CHECK") == "1":  # the latter: tests of this guard
        return
    import importlib

    missing = []
    for name in CI_REQUIRED_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as err:
            missing.append(f"{name} ({err})")
    if missing:
        raise pytest.UsageError(f"MOESIM_CI=1 but these do not import: {', '.join(missing)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Under CI a skip is a failure, unless the test is marked as needing GPU hardware or shared data
    (``../shared``, beside the checkout); an expected failure (xfail) is not a skip."""
    outcome = yield
    report = outcome.get_result()
    allowed = (*HARDWARE_MARKERS, "shared_data")
    if CI and report.skipped and not hasattr(report, "wasxfail") and not any(item.get_closest_marker(m) for m in allowed):
        report.outcome = "failed"
        report.longrepr = f"skipped under MOESIM_CI=1 (CI must not pass by skipping): {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):  # type: ignore[no-untyped-def]
    """Under CI a module skipped at collection (a missing import) is a failure."""
    outcome = yield
    report = outcome.get_result()
    if CI and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"collection skipped under MOESIM_CI=1 (CI must not pass by skipping): {report.longrepr}"


#: Packages whose memoised functions (functools caches) mutation testing must see run in every test.
MUTATED_PACKAGES = ("sim", "calibrate")


def clear_memoised(packages: tuple[str, ...] = MUTATED_PACKAGES) -> int:
    """Empty every functools cache at module level in ``packages``; returns how many were emptied."""
    emptied = 0
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in packages:
            continue
        for obj in list(vars(module).values()):
            clear = getattr(obj, "cache_clear", None)
            if callable(clear) and hasattr(obj, "cache_info"):
                clear()
                emptied += 1
    return emptied


@pytest.fixture(autouse=True)
def _memoised_code_runs_in_every_test_under_mutation_testing() -> None:
    """Under mutmut (``MUTANT_UNDER_TEST`` set), each test starts with empty caches. mutmut learns which tests
    reach a function by running the suite once and records a test only where the function actually ran: behind
    a cache warmed by an earlier test (the DualPipe orders, the loaded catalogs and stacks) a later test reads
    the result without running it, is never chosen for that function's mutants, and their survival says nothing
    about the tests. Outside mutation testing the caches are left alone."""
    clear_if_mutation_testing()


def clear_if_mutation_testing() -> bool:
    """:func:`clear_memoised` when mutmut runs the tests (``MUTANT_UNDER_TEST`` set); whether it did."""
    if os.environ.get("MUTANT_UNDER_TEST"):
        clear_memoised()
        return True
    return False
