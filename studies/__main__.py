"""``python -m studies ...``: an alias of ``moesim validate|study|plan ...`` (the command's top floor).

This entry script is the only place under ``studies/`` that reaches the ``moesim`` command layer; no
studies module imports it.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from moesim.cli import main

    args = sys.argv[1:]
    if args[:1] and args[0] not in ("validate", "study", "plan", "-h", "--help"):
        print(f"python -m studies: error: unknown command {args[0]!r}; use validate, study or plan", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(args))
