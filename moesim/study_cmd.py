"""placeholder"""
from typing import Any


def add_study(subparsers: Any) -> None:
    pass
