"""Run ``moesim`` in-process and check the bad-input contract: exit 2, one line, no traceback."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from moesim.cli import main

__all__ = ["run_cli", "assert_user_error"]


def run_cli(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``moesim ARGV`` in this process: (exit code, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse exits for usage errors, --help and --version
        code = exc.code if isinstance(exc.code, int) else 2
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_user_error(result: tuple[int, str, str], *needles: str) -> str:
    """Exit code 2, exactly one stderr line naming every needle, no traceback, nothing on stdout."""
    code, out, err = result
    message = err.strip()
    assert code == 2, f"exit {code}; stderr {err!r}"
    assert "Traceback" not in err and "internal error" not in err, err
    assert len(message.splitlines()) == 1, message
    assert not out.strip(), out
    for needle in needles:
        assert needle in message, message
    return message
