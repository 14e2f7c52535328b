"""The store's modules are pure: no I/O, no clock, no global randomness.

The rule `tests/test_layering.py` enforces for the framework's cores (on each
module and everything it imports), applied to every module of the key-value
store but its shells (server.py, router.py, node.py, launcher.py, cli.py),
which do the I/O, and its test support (testing/).
"""

from __future__ import annotations

import pytest

import tests.test_layering as layering

PURE_MODULES = [
    "commands.py",
    "server_commands.py",
    "content_hash.py",
    "digests.py",
    "dispatch.py",
    "endpoints.py",
    "errors.py",
    "expiry.py",
    "glob.py",
    "keys.py",
    "keyspace.py",
    "limits.py",
    "numbers.py",
    "options.py",
    "resp.py",
    "state.py",
    "strings.py",
    "transactions.py",
    "state_machine.py",
]


@pytest.mark.parametrize("name", PURE_MODULES)
def test_module_and_all_it_imports_do_no_io(name: str) -> None:
    assert layering.impurities_reached(f"kvstore.{name.removesuffix('.py')}") == []
