"""Run the runnable examples in the docstrings of every torch-free module."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import calibrate
import sim
import studies


def torch_free_modules() -> list[str]:
    names = []
    for package in (sim, calibrate, studies):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.endswith("__main__"):
                names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", torch_free_modules())
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
