"""The tuner chooses recomputation and micro-batches per layout: each layout is searched under the first open choice
that fits it with its own GeMM panels and replicas counted, and layouts under different choices compete by their
whole steps (``tuning.gates.Admission``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import tpusim.api as tp
from tpusim.hardware import load_hardware
from tpusim.tuning.gates import need_text
from tpusim.units import GB

# GPT-3 with Wang's collective matmul on 128 calibrated chips: only 4x32 fits the whole batch as one micro-batch
WANG = {"model": "gpt3-175b", "hardware": "meshslice-sim", "chips": 128, "algorithm": "wang"}


@pytest.fixture(scope="module")
def tuned() -> tp.TuneResult:
    return tp.tune(**WANG)


@pytest.mark.slow
def test_a_layout_that_needs_more_micro_batches_can_win(tuned: tp.TuneResult) -> None:
    one = tp.tune(**WANG, microbatches=1)  # the count fixed: only the layout that fits it is searched
    assert (one.best.mesh, one.best.microbatches) == ("4x32", 1)
    assert (tuned.best.mesh, tuned.best.microbatches, tuned.best.recompute) == ("16x8", 2, "full")
    assert (tuned.microbatches, tuned.recompute) == (2, "full")  # the result's are the best's
    assert tuned.best.step_time_s < one.best.step_time_s / 2
    # the answer is the step a user runs by hand with the choice it names
    again = tp.step(model="gpt3-175b", hardware="meshslice-sim", layout=tuned.best.layout, algorithm="wang",
                    recompute="full", microbatches=2, dataflows=tuned.best.dataflows,
                    transposes=tuned.best.transposes)
    assert again.step_time_s == pytest.approx(tuned.best.step_time_s, rel=1e-12)
    assert again.memory_bytes_per_chip <= load_hardware("meshslice-sim").chip.usable_hbm


@pytest.mark.slow
def test_every_timed_layout_carries_the_choice_it_ran_with(tuned: tp.TuneResult) -> None:
    by_mesh = {c.mesh: (c.microbatches, c.recompute) for c in tuned.candidates}
    assert by_mesh["16x8"] == (2, "full")
    assert tuned.runner_up is not None and tuned.runner_up.microbatches == 2
    assert ("8x16, 16x8: searched with recompute full and 2 micro-batches, the least that fits them"
            in tuned.notes)
    assert tuned.notes[0] == ("memory: recompute full, 2 micro-batches of 64 sequences, "
                              f"{tuned.best.memory_bytes_per_chip / GB:.1f} GB per chip of 33.0 GB")
    # 4x32 fits one micro-batch, so it is searched (and ranked) at one, by its whole step
    report = {m.mesh: m for m in tuned.meshes}["4x32"]
    assert report.status == "simulated" and report.estimate_step_s == pytest.approx(
        tp.tune(**WANG, microbatches=1).best.estimate_step_s, rel=1e-12)


@pytest.mark.slow
def test_a_rule_broken_keeps_its_reason_whatever_the_choice(tuned: tp.TuneResult) -> None:
    reasons = {m.mesh: m.reason for m in tuned.meshes}
    assert reasons["1x128"] is not None and "does not divide the 96 heads" in reasons["1x128"]


@dataclass(frozen=True)
class _Need:
    total_bytes: float
    capacity_bytes: float


@pytest.mark.parametrize(("need", "shown"), [
    (34.0e9, "needs 34.0 GB per chip of 33.0 GB"),
    (33.04e9, "needs 33.04 GB per chip of 33.02 GB"),
    (33.0224e9, "needs 33.022 GB per chip of 33.020 GB"),
])
def test_a_need_is_shown_with_the_digits_that_tell_it_from_the_capacity(need: float, shown: str) -> None:
    capacity = 33.0e9 if shown.endswith("33.0 GB") else 33.02e9
    assert need_text(_Need(need, capacity)) == shown  # type: ignore[arg-type]
