"""The timing cache: keyed by everything that determines a timing; disk only where the user says."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import tpusim.api as tp
from tpusim.cli.main import main
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


def _one_entry(folder: Path) -> Path:
    entries = sorted(folder.glob("*.json"))
    assert entries
    return entries[0]


def _gemm(context: Context) -> float:
    result = tp.gemm(hardware="meshslice-sim", mesh="4x4", algorithm="collective", dataflow="os",
                     m=4096, n=4096, k=4096, context=context)
    return float(result.time_s)


def _recomputed_after(folder: Path, damage: Callable[[Path], None]) -> tuple[float, float, int]:
    """(fresh time, time after damaging the one disk entry, entries rejected), each from a new context."""
    fresh = _gemm(Context.with_cache(folder))
    damage(_one_entry(folder))
    context = Context.with_cache(folder)
    again = _gemm(context)
    return fresh, again, context.timings.rejected


def _edit_time(path: Path) -> None:
    entry = json.loads(path.read_text())
    entry["value"]["time_s"] = -1
    path.write_text(json.dumps(entry))


def _truncate(path: Path) -> None:
    path.write_text(path.read_text()[:40])


def _foreign(path: Path) -> None:
    path.write_text(json.dumps(["not", "an", "entry"]))


def _old_format(path: Path) -> None:
    path.write_text(json.dumps(json.loads(path.read_text())["value"]))


def _nan_with_digest(path: Path) -> None:
    # a consistent digest does not make an implausible value trusted
    entry = json.loads(path.read_text())
    entry["value"]["time_s"] = float("nan")
    entry["digest"] = cache_key(entry["value"])
    path.write_text(json.dumps(entry))


def _forged(path: Path) -> None:
    # a plausible value with its plain hash recomputed: only the folder's key makes a digest that verifies
    entry = json.loads(path.read_text())
    entry["value"]["time_s"] *= 2
    entry["digest"] = cache_key(entry["value"])
    path.write_text(json.dumps(entry))


@pytest.mark.parametrize("damage", [_edit_time, _truncate, _foreign, _old_format, _nan_with_digest, _forged])
def test_damaged_disk_entries_are_recomputed_and_replaced(tmp_path: Path, damage: Callable[[Path], None]) -> None:
    fresh, again, rejected = _recomputed_after(tmp_path, damage)
    assert again == fresh
    assert rejected == 1
    # the entry was replaced by a sound one: a third context reads it without rejecting anything
    context = Context.with_cache(tmp_path)
    assert _gemm(context) == fresh
    assert (context.timings.rejected, context.timings.hits) == (0, 1)


def test_an_entry_filed_under_another_key_is_not_used(tmp_path: Path) -> None:
    _gemm(Context.with_cache(tmp_path))
    entry = _one_entry(tmp_path)
    entry.rename(tmp_path / f"{'0' * 64}.json")
    context = Context.with_cache(tmp_path)
    assert context.timings.get("0" * 64) is None
    assert context.timings.rejected == 1


def test_a_cache_path_naming_a_file_is_one_line_exit_2(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "cache.json"
    target.write_text("{}")
    status = main(["--cache", str(target), "list", "hardware"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err == [f"cache folder {str(target)!r} is a file; give a folder (it is created if missing)"]
    assert target.read_text() == "{}"
