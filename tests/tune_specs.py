"""Tune specs for tests that call the search (``tuning.search.tune``) directly, resolved as a runner resolves a
request: its model and hardware as given, its algorithm looked up by name."""

from __future__ import annotations

from typing import Any

from tpusim.gemm.registry import get_algorithm
from tpusim.tuning.spec import TuneSpec, tune_spec


def tune_for(**fields: Any) -> TuneSpec:
    """The spec of a tune request of ``fields`` (``model`` and ``hardware`` the loaded objects)."""
    request = TuneSpec(**fields)
    return tune_spec(request, request.transformer, request.profile, get_algorithm(request.algorithm))
