"""The `arguments` column is strict JSON: floats JSON has no number for are strings."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from rsm.spark.rows import arguments_json


def _strict(text: str) -> Any:
    """`text` parsed as JSON, refusing `NaN`, `Infinity` and `-Infinity`, which JSON lacks."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    ("value", "text"),
    [(math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity")],
)
def test_a_non_finite_float_is_written_as_a_string(value: float, text: str) -> None:
    written = arguments_json([value, 1.5, [value]], {"limit": value})
    assert _strict(written) == {"args": [text, 1.5, [text]], "kwargs": {"limit": text}}
