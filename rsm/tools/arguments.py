"""Arguments of a command or query given on the command line (`rsm call`, `rsm query`,
`rsm replay --query`).

Each word is parsed as JSON where it parses (`5`, `"x"`, `[1, 2]`, `null`) and
taken as text otherwise (`hello`); `key=value` words are keyword arguments,
the value parsed the same way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def parse_arguments(words: Sequence[str]) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments of `call` / `query` (see the module docstring)."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for word in words:
        key, equals, value = word.partition("=")
        if equals and key.isidentifier():
            kwargs[key] = _value(value)
        else:
            args.append(_value(word))
    return args, kwargs


def _value(word: str) -> Any:
    try:
        return json.loads(word)
    except ValueError:
        return word
