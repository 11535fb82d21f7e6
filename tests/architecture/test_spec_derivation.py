"""A step's spec is derived from its request, not copied option by option: ``StepSpec`` is built in one place,
``model.plan.derived_spec``, which takes every field a request shares with it from the request and refuses to run
without the fields the request holds unresolved."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from tpusim.config.requests import StepRequest, TuneRequest
from tpusim.model.plan import RESOLVED, StepSpec, derived_spec

PACKAGE = Path(__file__).resolve().parents[2] / "tpusim"
BUILD = re.compile(r"\bStepSpec\(")


def test_step_specs_are_built_only_by_the_derivation() -> None:
    sites = {str(path.relative_to(PACKAGE.parent)): len(BUILD.findall(path.read_text(encoding="utf-8")))
             for path in sorted(PACKAGE.rglob("*.py")) if BUILD.search(path.read_text(encoding="utf-8"))}
    assert sites == {"tpusim/model/plan.py": 1}


def test_the_count_sees_a_build() -> None:
    assert BUILD.findall("spec = StepSpec(model, algorithm, 8)") and not BUILD.findall("class StepSpec:")


def test_every_shared_option_is_taken_from_the_request() -> None:
    request = StepRequest.model_validate({"model": "gpt3-175b", "hardware": "tpuv4", "chips": 16, "mesh": "4x4",
                                          "algorithm": "cannon", "variant": "skew", "embedding": True,
                                          "bytes_per_param": 18, "prefetch_window": 3, "zero_stage": 2,
                                          "allow_infeasible": True, "attention": "fused"})
    resolved = {name: getattr(StepSpec, name, None) for name in RESOLVED}
    resolved |= {"model": object(), "algorithm": object(), "batch": 16}
    spec = derived_spec(request, **resolved)
    shared = {f.name for f in fields(StepSpec)} & set(StepRequest.model_fields) - RESOLVED
    assert shared and all(getattr(spec, name) == getattr(request, name) for name in shared)
    assert (spec.variant, spec.embedding, spec.bytes_per_param, spec.prefetch_window, spec.zero_stage) == (
        "skew", True, 18, 3, 2)


def test_a_resolved_field_left_out_is_refused() -> None:
    request = TuneRequest.model_validate({"model": "gpt3-175b", "hardware": "tpuv4", "chips": 16})
    with pytest.raises(ValueError, match=r"needs the resolved .*dataflows"):  # tune's dataflows are a set searched
        derived_spec(request, model=object(), algorithm=object(), batch=16, prefetch=None, recompute=None,
                     microbatches=1, prefetch_budget=None, remat_save=frozenset(), remat_offload=frozenset())
