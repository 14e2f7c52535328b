"""Finding the application's class a command names (`MODULE:CLASS`), or any named object.

`--app-dir` (the current directory by default) goes first on the import
path, so a tool finds the application's code as `rsm run` does.
"""

from __future__ import annotations

import importlib
import os
import sys

from rsm.core.state_machine import StateMachine
from rsm.errors import InvalidConfig


def load_named(target: str, form: str = "MODULE:NAME") -> object:
    """What `target` ("package.module:name") names; None when the module has no such name."""
    module_name, colon, name = target.partition(":")
    if not colon or not module_name or not name:
        raise InvalidConfig(f"{target!r} is not {form}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidConfig(f"cannot import {module_name}: {error}") from None
    return getattr(module, name, None)


def load_machine(target: str) -> type[StateMachine]:
    """The StateMachine subclass `target` ("package.module:Class") names."""
    machine = load_named(target, "MODULE:CLASS")
    if not isinstance(machine, type) or not issubclass(machine, StateMachine):
        raise InvalidConfig(f"{target} is not a StateMachine subclass")
    return machine


def add_app_dir(app_dir: str) -> None:
    """Put `app_dir` first on the import path (once)."""
    path = os.path.abspath(app_dir)
    if path not in sys.path:
        sys.path.insert(0, path)
