"""The store's modules are pure: no I/O, no clock, no global randomness.

The rule `tests/test_layering.py` enforces for the framework's cores (on each
module and everything it imports), applied to every module of the key-value
store outside its shells (`runtime/`: the server, the router, the node;
`spark_reducer`, whose `rsm.spark` side loads reducers by name), its
command line (`tools/`) and its test support (`testing/`).
"""

from __future__ import annotations

import pytest

import tests.test_layering as layering

_IMPURE_FOLDERS = ("kvstore.runtime", "kvstore.spark_reducer", "kvstore.tools", "kvstore.testing")

PURE_MODULES = sorted(
    name
    for name in layering._modules()
    if name.startswith("kvstore.")
    and not any(name == folder or name.startswith(folder + ".") for folder in _IMPURE_FOLDERS)
)


def test_the_pure_modules_are_found() -> None:
    assert {"kvstore.state_machine", "kvstore.store.state", "kvstore.protocol.resp"} <= set(
        PURE_MODULES
    )


@pytest.mark.parametrize("name", PURE_MODULES)
def test_module_and_all_it_imports_do_no_io(name: str) -> None:
    assert layering.impurities_reached(name) == []
