"""The fuzz tests' Hypothesis settings: a short run in the normal suite, a long one on demand.

`FUZZ_PROFILE=long` (what `make fuzz` sets) runs many more examples per test;
the default, "ci", keeps every fuzz test together to seconds.  A decoder that
spends more than `deadline` on one input counts as hanging: every input here is
at most tens of kilobytes, so the bound is generous.
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings

settings.register_profile(
    "fuzz-ci",
    max_examples=40,
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "fuzz-long",
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "20000")),
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

FUZZ = settings.get_profile("fuzz-long" if os.environ.get("FUZZ_PROFILE") == "long" else "fuzz-ci")
"""Decorate each fuzz test with `@FUZZ`."""
