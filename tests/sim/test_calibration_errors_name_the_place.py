"""Every refusal of a malformed calibration file names the file and the place in it: each leaf and each
table of every bundled calibration, one at a time given a value of the wrong type, must be refused with a
message that starts with the file's name and holds the dotted path of what was wrong (``gemm_eff.fp8.values[3]``,
``comm_rates.deepep_dispatch``, ``device_spec.num_sms``)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from sim.calibration import BUNDLED, bundled_path, parse_calibration
from sim.errors import ConfigError

ORIGIN = "broken-cal.json"
PER_TABLE = 24


def _paths(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*path, i))


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out


def _wrong_type(value: Any) -> Any:
    if isinstance(value, dict):
        return ["not", "a", "table"]
    if isinstance(value, list):
        return {"not": "a list"}
    if isinstance(value, str) or value is None:
        return 7
    return "seven"


def _document(name: str) -> dict[str, Any]:
    """A bundled calibration; ``full``: the trace's, with the tables no bundled file holds added (a
    measured device spec, attention curves per pass, a host-sync gap)."""
    if name != "full":
        return dict(json.loads(bundled_path(name).read_text(encoding="utf-8")))
    data = _document("h800-deepseek-trace")
    data["device_spec"] = {"name": "h800", "arch": "sm90", "bf16_flops": 989e12, "fp8_flops": 1979e12,
                           "hbm_bytes": 80e9, "hbm_bw_bytes_per_s": 3.35e12, "num_sms": 132, "mxfp8": False,
                           "exp_per_s": 0.0}
    data["attn_eff"] = {"fwd": {"sizes": [1e9, 1e12], "values": [0.3, 0.6]},
                        "bwd": {"sizes": [1e9, 1e12], "values": [0.25, 0.5]}}
    data["host_sync_s"] = 2e-5
    return data


def _cases() -> list[tuple[str, tuple[str | int, ...]]]:
    """(document, path) of places in every table: each place once (the first document holding it), within
    a list its first two items, at most about :data:`PER_TABLE` a table."""
    by_table: dict[str | int, list[tuple[str, tuple[str | int, ...]]]] = {}
    seen = set()
    for name in (*BUNDLED, "full"):
        for path in _paths(_document(name)):
            if path and path not in seen and not any(isinstance(p, int) and p > 1 for p in path):
                seen.add(path)
                by_table.setdefault(path[0], []).append((name, path))
    out = []
    for cases in by_table.values():  # at most PER_TABLE a table, spread over it (its first, its last)
        step = max(1, -(-len(cases) // PER_TABLE))
        out += cases[::step] + ([cases[-1]] if (len(cases) - 1) % step else [])
    return out


CASES = _cases()


def test_the_cases_cover_every_table_of_the_bundled_calibrations() -> None:
    tops = {path[0] for _, path in CASES}
    assert {"gemm_eff", "grouped_gemm_eff", "comm_rates", "device_spec", "stack_efficiency", "sm_sharing",
            "op_seconds", "residuals", "provenance", "notes", "attn_eff", "host_sync_s"} <= tops, tops
    assert len(CASES) > 100, len(CASES)


@pytest.mark.parametrize(("name", "path"), CASES, ids=[f"{n}:{_dotted(p)}" for n, p in CASES])
def test_a_value_of_the_wrong_type_is_refused_naming_the_file_and_the_place(name: str,
                                                                            path: tuple[str | int, ...]) -> None:
    data = _document(name)
    parse_calibration(json.dumps(data), origin=ORIGIN)  # the file as shipped is accepted
    broken = copy.deepcopy(data)
    holder = broken
    for p in path[:-1]:
        holder = holder[p]
    original = holder[path[-1]]
    holder[path[-1]] = _wrong_type(original)
    with pytest.raises(ConfigError) as err:
        parse_calibration(json.dumps(broken), origin=ORIGIN)
    message = str(err.value)
    assert message.startswith(f"{ORIGIN}: "), message
    # a list of strings (notes, provenance sources) is named as a whole
    place = _dotted(path[:-1]) if isinstance(path[-1], int) and isinstance(original, str) else _dotted(path)
    assert place in message, message
