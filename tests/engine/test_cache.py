"""The timing cache: keyed by everything that determines a timing; disk only where the user says."""

from __future__ import annotations

from pathlib import Path

import tpusim.api as tp
from tpusim.engine.cache import cache_key
from tpusim.engine.context import Context
from tpusim.hardware import load_hardware, scaled_profile


def test_key_changes_with_every_input() -> None:
    hardware = load_hardware("meshslice-sim")
    base = cache_key("step", {"mesh": "32x8"}, hardware)
    assert base == cache_key("step", {"mesh": "32x8"}, hardware)
    assert base != cache_key("step", {"mesh": "16x16"}, hardware)
    assert base != cache_key("step", {"mesh": "32x8"}, scaled_profile(hardware, bandwidth=2))


def test_cached_step_equals_a_fresh_one_and_disk_round_trips(tmp_path: Path) -> None:
    context = Context.with_cache(tmp_path)
    cache = context.timings
    args = {"model": "gpt3-175b", "hardware": "meshslice-sim", "mesh": "16x16", "algorithm": "collective",
            "context": context}
    first = tp.step(**args)
    assert list(tmp_path.glob("*.json"))  # written to the named folder
    first.notes.append("a caller's annotation must not leak into the cache")
    entries, misses = len(cache.memory), cache.misses
    again = tp.step(**args)
    assert (len(cache.memory), cache.misses) == (entries, misses)  # answered from the cache alone
    assert again.step_time_s == first.step_time_s
    assert "a caller's annotation must not leak into the cache" not in again.notes
    cache.memory.clear()
    from_disk = tp.step(**args)
    assert from_disk.to_dict() == again.to_dict()


def test_contexts_share_nothing() -> None:
    args = {"model": "gpt3-175b", "hardware": "meshslice-sim", "mesh": "8x8", "algorithm": "collective",
            "ignore_memory": True}
    first, second = Context(), Context()
    tp.step(**args, context=first)
    assert first.timings.memory and not second.timings.memory


def test_no_disk_cache_unless_named(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TPUSIM_CACHE_DIR", raising=False)
    assert Context.with_cache().cache_folder is None
    tp.step(model="gpt3-175b", hardware="meshslice-sim", mesh="8x8", algorithm="collective", ignore_memory=True)
    assert list(tmp_path.iterdir()) == []
