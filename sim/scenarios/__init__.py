"""Built-in scenario files (TOML): a base plan and named variants, with measured numbers where published.

>>> "dsv3-671b-b200" in scenario_names()
True
"""

from __future__ import annotations

from importlib import resources

__all__ = ["scenario_names", "scenario_text"]


def scenario_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("sim.scenarios").iterdir() if p.name.endswith(".toml"))


def scenario_text(name: str) -> str:
    return resources.files("sim.scenarios").joinpath(f"{name}.toml").read_text(encoding="utf-8")
