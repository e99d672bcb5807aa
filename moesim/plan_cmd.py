"""placeholder"""
from typing import Any


def add_plan(subparsers: Any) -> None:
    pass
