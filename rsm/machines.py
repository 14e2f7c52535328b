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
        hint = ""
        if isinstance(error, ModuleNotFoundError) and error.name == module_name.split(".")[0]:
            hint = (
                f" (the import path starts at {sys.path[0] or os.getcwd()}: run from the "
                "directory that holds the module, or name it with --app-dir)"
            )
        raise InvalidConfig(f"cannot import {module_name}: {error}{hint}") from None
    return getattr(module, name, None)


def load_machine(target: str) -> type[StateMachine]:
    """The StateMachine subclass `target` ("package.module:Class") names."""
    machine = load_named(target, "MODULE:CLASS")
    if machine is None:
        module_name, _, name = target.partition(":")
        module = sys.modules[module_name]
        found = sorted(
            attribute
            for attribute, value in vars(module).items()
            if isinstance(value, type)
            and issubclass(value, StateMachine)
            and value.__module__ == module_name
        )
        has = f"; it has {', '.join(found)}" if found else ", nor any StateMachine subclass"
        raise InvalidConfig(f"module {module_name} has no {name}{has}")
    if not isinstance(machine, type) or not issubclass(machine, StateMachine):
        raise InvalidConfig(f"{target} is not a StateMachine subclass")
    return machine


def add_app_dir(app_dir: str) -> None:
    """Put `app_dir` first on the import path (once)."""
    path = os.path.abspath(app_dir)
    if path not in sys.path:
        sys.path.insert(0, path)
