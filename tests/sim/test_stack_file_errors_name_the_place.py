"""Every refusal of a malformed stack profile file names the file and the field: each ``[stack]`` field and
each efficiency of every built-in profile, copied to a user file and given a value of the wrong type (or,
for an efficiency, one out of range), is refused with a message naming the file, the field and the value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.stacks import load_stack

PROFILES = Path(__file__).resolve().parents[2] / "sim" / "stack_profiles"
_LINE = re.compile(r'^(?P<key>"?[\w*.-]+"?)\s*=\s*(?P<value>.+)$')


def _cases() -> list[tuple[str, str, int, str]]:
    """(profile, section, line number, key) of every ``key = value`` line outside ``[sources]``."""
    out = []
    for path in sorted(PROFILES.glob("*.toml")):
        section = ""
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            if line.startswith("["):
                section = line.strip("[]")
            elif (m := _LINE.match(line)) and section != "sources":
                out.append((path.stem, section, i, m["key"].strip('"')))
    return out


def _wrong(value: str, section: str) -> str:
    if section.startswith("efficiency"):
        return "2.5"  # outside (0, 1.5]
    if value.startswith(('"', "[", "{")) or value in ("true", "false"):
        return "7"
    return '"seven"'


CASES = _cases()


def test_the_cases_cover_every_profile_and_both_tables() -> None:
    assert {c[0] for c in CASES} == {p.stem for p in PROFILES.glob("*.toml")}
    assert {c[1].split(".")[0] for c in CASES} == {"stack", "efficiency"}


@pytest.mark.parametrize(("profile", "section", "line", "key"), CASES,
                         ids=[f"{p}:{s}.{k}" for p, s, _, k in CASES])
def test_a_wrong_value_in_a_stack_file_is_refused_naming_the_file_and_the_field(
        tmp_path: Path, profile: str, section: str, line: int, key: str) -> None:
    lines = (PROFILES / f"{profile}.toml").read_text(encoding="utf-8").splitlines()
    good = tmp_path / "good.toml"
    good.write_text("\n".join(lines) + "\n", encoding="utf-8")
    load_stack(str(good))  # the profile as shipped loads from a user file
    m = _LINE.match(lines[line])
    assert m is not None
    bad_value = _wrong(m["value"], section)
    lines[line] = f"{m['key']} = {bad_value}"
    bad = tmp_path / "bad-stack.toml"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_stack(str(bad))
    message = str(err.value)
    assert str(bad) in message, message
    field = f"efficiency.{section.split('.', 1)[1].strip(chr(34))}.{key}" if section.startswith("efficiency") else key
    assert field in message, message
    assert bad_value.strip('"') in message, message
