"""Run the docstring examples of every reference module."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import reference


def reference_modules() -> list[str]:
    return sorted(
        info.name
        for info in pkgutil.walk_packages(reference.__path__, "reference.")
        if not info.name.endswith("__main__")
    )


@pytest.mark.parametrize("name", reference_modules())
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
