"""Arguments of a command or query given on the command line (`rsm call`, `rsm query`,
`rsm replay --query`).

Each word is parsed as JSON where it parses (`5`, `"x"`, `[1, 2]`, `null`) and
taken as text otherwise (`hello`); `key=value` words are keyword arguments,
the value parsed the same way.  Bytes are written as the output shows them,
an object whose one key is `hex` (`{"hex": "6869"}` is `b"hi"`), at any depth.
With `as_bytes` (the commands' `--bytes`, for an application whose arguments
are bytes, like the key-value store's), every text is its UTF-8 bytes instead.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from rsm.errors import InvalidConfig


def add_bytes_argument(parser: argparse.ArgumentParser) -> None:
    """`--bytes`: the arguments' texts are passed as their UTF-8 bytes."""
    parser.add_argument(
        "--bytes",
        action="store_true",
        help='pass every text argument as its UTF-8 bytes (any bytes: {"hex": "..."})',
    )


def parse_arguments(
    words: Sequence[str], *, as_bytes: bool = False
) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments of `call` / `query` (see the module docstring);
    `InvalidConfig` for a `hex` object that is not hex."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for word in words:
        key, equals, value = word.partition("=")
        if equals and key.isidentifier():
            kwargs[key] = _value(value, as_bytes)
        else:
            args.append(_value(word, as_bytes))
    return args, kwargs


def key_bytes(word: str) -> bytes:
    """A key given on the command line: `{"hex": "..."}` for any bytes, else the bytes the
    shell passed (UTF-8 or not); `InvalidConfig` for a `hex` object that is not hex."""
    if word.startswith("{"):
        try:
            parsed = json.loads(word)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.keys() == {"hex"}:
            return _hex_bytes(parsed["hex"])
    return word.encode("utf-8", "surrogateescape")


def _value(word: str, as_bytes: bool) -> Any:
    try:
        parsed = json.loads(word)
    except ValueError:
        parsed = word
    return _converted(parsed, as_bytes)


def _converted(value: Any, as_bytes: bool) -> Any:
    if isinstance(value, str):
        # As bytes, what the shell passed, even when it is not UTF-8.
        return value.encode("utf-8", "surrogateescape") if as_bytes else value
    if isinstance(value, list):
        return [_converted(item, as_bytes) for item in value]
    if isinstance(value, dict):
        if value.keys() == {"hex"}:
            return _hex_bytes(value["hex"])
        return {key: _converted(item, as_bytes) for key, item in value.items()}
    return value


def _hex_bytes(text: object) -> bytes:
    try:
        if not isinstance(text, str):
            raise ValueError
        return bytes.fromhex(text)
    except ValueError:
        raise InvalidConfig(
            f'{{"hex": {json.dumps(text)}}} is not bytes: "hex" takes an even number of hex digits'
        ) from None
