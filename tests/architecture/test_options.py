"""Every step and tune option is declared once: in the request model that owns it (a base that ``step`` and
``tune`` share, or the one entry point that takes it), never copied into another request or into the search's
spec. A copy drifts (its help text, its default, its checks), which is what this test stops."""

from __future__ import annotations

from collections import Counter

from tpusim.config.requests import PlanRequest, StepRequest, TuneRequest
from tpusim.tuning.spec import TuneSpec

# Same name, a different option: each is declared once per entry point, and says what differs
DISTINCT = {
    "chips": "step: optional, must equal the mesh's; tune: required, every mesh of that many chips is searched",
    "microbatches": "step: a count, 1 by default; tune: default the fewest that fit",
    "dataflows": "step: one per FF layer; tune: the set each layer may choose from",
    "zero_stage": "tune also takes 'any' (every stage searched)",
}
DISCRIMINATOR = "kind"  # each request names its own kind


def _classes() -> list[type]:
    """The step and tune requests, every base they declare fields in, and the search's spec."""
    found: dict[type, None] = {}
    for kind in (StepRequest, TuneRequest, PlanRequest, TuneSpec):
        for cls in kind.__mro__:
            if cls.__module__.startswith("tpusim.") and vars(cls).get("__annotations__"):
                found[cls] = None
    return list(found)


def declarations() -> Counter[str]:
    """How many of the classes declare each field name (annotations of the class body itself; a private attribute,
    such as the spec's resolved algorithm, is no option)."""
    counts: Counter[str] = Counter()
    for cls in _classes():
        counts.update(name for name in vars(cls)["__annotations__"]
                      if name != DISCRIMINATOR and not name.startswith("_"))
    return counts


def test_every_option_is_declared_once() -> None:
    copied = {name: count for name, count in declarations().items() if count > 1 and name not in DISTINCT}
    assert copied == {}, f"declared more than once (declare it in one base, or _arrange a default): {copied}"


def test_distinct_options_are_one_per_entry_point() -> None:
    counts = declarations()
    assert {name: counts[name] for name in DISTINCT} == dict.fromkeys(DISTINCT, 2)


def test_the_spec_declares_no_option() -> None:
    assert [name for name in vars(TuneSpec).get("__annotations__", {}) if not name.startswith("_")] == []
    assert set(TuneSpec.model_fields) == set(TuneRequest.model_fields)


def test_the_count_sees_a_copy() -> None:
    class Copied(TuneRequest):
        batch: int | None = None  # a second declaration of a shared option

    counts = declarations()
    counts.update(name for name in vars(Copied)["__annotations__"])
    assert counts["batch"] == 2
