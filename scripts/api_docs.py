"""Builds the API reference of the framework's public surface from its docstrings, with pdoc.

    python scripts/api_docs.py [OUTPUT_DIR]        (`make docs`; default docs/api)

The surface is what applications import (`MODULES`): `rsm` (`StateMachine`,
`command`, `query`, `Context`, the clients, `Replica` for embedding, the
errors a caller catches) and `rsm.errors` (the whole exception tree).  The
output is HTML, `OUTPUT_DIR/index.html` first; it is built on demand, not
kept in the repository.  Any warning pdoc gives (a docstring or annotation it
cannot read) is printed and fails the build, exit status 1, so that the
reference stays complete; the tests build it the same way.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pdoc

MODULES = ("rsm", "rsm.errors")
DEFAULT_OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "api"


def main(argv: list[str]) -> int:
    output = Path(argv[0]) if argv else DEFAULT_OUTPUT
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*MODULES, output_directory=output)
    for warning in caught:
        print(f"api docs: warning: {warning.message}", file=sys.stderr)
    if caught:
        return 1
    print(f"API reference in {output / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
