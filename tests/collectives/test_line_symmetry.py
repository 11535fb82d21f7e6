"""A symmetric run that leaves out the dimensional lines running like a kept one (tpusim/engine/lines.py) reports
what the run with every line reports, to the bit where nothing is summed differently: step results compared whole
(every field, to 1e-12 relative) with and without the reduction, over algorithms, layouts with data and FSDP axes,
ZeRO stages, prefetch policies and three-axis rings; the reduction is shown to have run (lines left out, transfers
counted), and a run that also uses ring operations on the axis (Wang's shifts) is run again with every line."""

from __future__ import annotations

import math
from typing import Any

import pytest

import tpusim.api as tp
import tpusim.model.program as program_module
from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.factory import network_for
from tpusim.collectives.physical.network import PhysicalNetwork
from tpusim.config import TransformerModel
from tpusim.engine import lines as lines_module
from tpusim.engine.lines import LineConflict, LineSymmetry
from tpusim.hardware import load_hardware
from tpusim.topology import map_mesh, parse_topology
from tpusim.vocabulary import CollectiveOp, Ring

TINY = TransformerModel(name="tiny", description="test model", layers=4, hidden=1024, heads=16, head_dim=64,
                        ffn=4096, sequence=64)
COMMON: dict[str, Any] = {"model": TINY, "hardware": "tpuv4", "batch": 64, "ignore_memory": True}

CASES = [
    {"topology": "4x4x4", "mesh": "64x1", "algorithm": "meshslice", "slices": 2},
    {"topology": "4x4x4", "mesh": "16x4", "algorithm": "collective"},
    {"topology": "4x4x4", "mesh": "16x4", "algorithm": "meshslice", "slices": 4, "dataflows": "ls"},
    {"topology": "4x4x4", "layout": "fsdp=64", "algorithm": "fsdp"},
    {"topology": "4x4x4", "layout": "fsdp=16,tensor=4", "algorithm": "tp1d"},
    {"topology": "4x4x4", "layout": "data=16,tensor=4", "algorithm": "tp1d", "zero_stage": 2},
    {"topology": "4x4x8", "mesh": "128x1", "algorithm": "collective", "prefetch": "window", "batch": 128},
    {"topology": "4x4x4", "layout": "fsdp=4,tensor=16", "algorithm": "tp1d", "prefetch": "previous-op"},
    {"topology": "4x4x4", "mesh": "64x1", "algorithm": "collective", "multi_axis": "snake"},  # one folded ring
    {"topology": "4x4x4", "layout": "data=4,tensor=4x4", "algorithm": "meshslice", "slices": 2},
]


def _step(monkeypatch: pytest.MonkeyPatch, leave_out: bool, fields: dict[str, Any]) -> dict[str, Any]:
    with monkeypatch.context() as patch:
        if not leave_out:
            patch.setattr(program_module, "with_lines", lambda run, memo, placement: run(None))
        result: dict[str, Any] = tp.step(fidelity="symmetric", **{**COMMON, **fields}).to_dict()
    return result


def _assert_same(got: Any, want: Any, path: str = "") -> None:
    if isinstance(want, dict):
        assert set(got) == set(want), path
        for key in want:
            _assert_same(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for index, (a, b) in enumerate(zip(got, want, strict=True)):
            _assert_same(a, b, f"{path}[{index}]")
    elif isinstance(want, float):
        assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-300), (path, got, want)
    else:
        assert got == want, path


@pytest.mark.parametrize("fields", CASES, ids=lambda f: f"{f.get('mesh') or f['layout']}-{f['algorithm']}")
def test_leaving_lines_out_changes_no_reported_figure(monkeypatch: pytest.MonkeyPatch, fields: dict[str, Any]) -> None:
    left_out: list[int] = []
    leaving_out = LineSymmetry.leaving_out

    def spy(self: LineSymmetry, axis: int) -> None:
        left_out.append(axis)
        leaving_out(self, axis)

    monkeypatch.setattr(LineSymmetry, "leaving_out", spy)
    reduced = _step(monkeypatch, True, fields)
    assert left_out, "no line was left out: the case does not exercise the reduction"
    _assert_same(reduced, _step(monkeypatch, False, fields))


def test_a_run_that_also_shifts_over_the_axis_runs_again_with_every_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wang's shifts on axis 1 meet the lines left out of its all-gathers there: the first window runs again with
    every line of axis 1, and the second keeps them from the start (the axis is remembered for the placement)."""
    conflicts: list[str] = []
    runs: list[frozenset[int]] = []
    with_lines = lines_module.with_lines

    def spy(run: Any, memo: dict[Any, Any], placement: object) -> Any:
        def tracked(lines: LineSymmetry | None) -> Any:
            assert lines is not None
            runs.append(lines.blocked)
            try:
                return run(lines)
            except LineConflict as conflict:
                conflicts.append(str(conflict))
                raise
        return with_lines(tracked, memo, placement)

    fields = {"topology": "4x4x4", "mesh": "4x16", "algorithm": "wang"}
    monkeypatch.setattr(program_module, "with_lines", spy)
    reduced = tp.step(fidelity="symmetric", **{**COMMON, **fields}).to_dict()
    assert conflicts == ["logical axis 1"]
    assert runs[0] == frozenset() and set(runs[1:]) == {frozenset({1})}
    _assert_same(reduced, _step(monkeypatch, False, fields))


def test_the_lines_left_out_are_counted_as_sent() -> None:
    """A 64-chip all-gather over x*y*z keeps, of every phase's 16 lines per part, the one through rank 0, and of
    that ring of 4 only rank 0's position: 1 message in 64, the others' transfers counted as sent. Every kept
    message leaves rank 0 and stands for the arrival at rank 0 (its receiver), which a rotation of the ring maps it
    onto."""
    network = network_for(load_hardware("tpuv4"), map_mesh(parse_topology("4x4x4"), 64, 1))
    assert isinstance(network, PhysicalNetwork)
    call = network.resolve(CollectiveCall(CollectiveOp.ALL_GATHER, 0, 64 * 2**20))
    whole = network.program(call, (0,))
    kept = network.program(call, (0,), (frozenset({0}),))
    assert kept.elsewhere_transfers == len(whole.src) - len(kept.src) > 0
    assert len(kept.src) * 64 == len(whole.src)
    assert set(kept.src.tolist()) == set(kept.dst.tolist()) == {0}
    assert kept.receiver is not None and set(kept.receiver.tolist()) == {network.mapping.chip(0, 0)}
    assert kept.idle_reported is not None and len(kept.idle_reported) == 0
    assert whole.receiver is None


def test_a_ring_folds_onto_runs_of_kept_positions() -> None:
    """Folding keeps ranks 1 and 2 of a ring of 6: rank 2's message forward stands for the arrival at rank 1 (the
    start of the run), rank 1's is a real arrival at rank 2, and rank 1 forwards what rank 2 sent the step before."""
    network = network_for(load_hardware("tpuv4"), map_mesh(parse_topology("torus:6"), 6, 1))
    assert isinstance(network, PhysicalNetwork)
    from tpusim.collectives.plans import PlanBuilder

    embedding = network.mapping.axes[0].groups[0]
    builder = PlanBuilder(embedding, Ring.UNIDIRECTIONAL, fold=frozenset({1, 2}))
    builder.ring_steps(3, [1.0, 1.0, 1.0], True)
    plan = builder.finish(1)
    assert plan.src.tolist() == [1, 2] * 3
    assert plan.dst.tolist() == [2, 1] * 3
    assert plan.pred.tolist() == [-1, -1, 1, 0, 3, 2]
    assert plan.receiver is not None and plan.receiver.tolist() == [embedding.members[r] for r in [2, 1] * 3]
    assert plan.folded_out == 4 * 3


@pytest.mark.parametrize("mesh, algorithm, slices", [("64x1", "meshslice", 2), ("16x4", "collective", None)])
def test_a_hoisted_gemm_is_timed_alike_with_lines_left_out(monkeypatch: pytest.MonkeyPatch, mesh: str,
                                                          algorithm: str, slices: int | None) -> None:
    """``gemm.hoisted`` (the tuner's bound) leaves lines out in symmetric runs too: the same time to the bit."""
    import tpusim.gemm.hoisted as hoisted
    from tpusim.gemm.dataflow import GemmProblem
    from tpusim.gemm.params import GemmParams
    from tpusim.gemm.registry import get_algorithm
    from tpusim.vocabulary import Dataflow, Fidelity, Prefetch

    rows, cols = (int(part) for part in mesh.split("x"))
    problem = GemmProblem(m=8192, n=4096, k=4096, dataflow=Dataflow.OS)
    params = GemmParams(prefetch=Prefetch.PREVIOUS_GEMM, slices=slices)

    def timed() -> float:
        network = network_for(load_hardware("tpuv4"), map_mesh(parse_topology("4x4x4"), rows, cols))
        return hoisted.hoisted_time(problem, get_algorithm(algorithm), params, network, Fidelity.SYMMETRIC)

    calls: list[bool] = []
    with_lines = hoisted.with_lines

    def spy(run: Any, memo: dict[Any, Any], placement: object) -> Any:
        calls.append(True)
        return with_lines(run, memo, placement)

    monkeypatch.setattr(hoisted, "with_lines", spy)
    reduced = timed()
    assert calls
    monkeypatch.setattr(hoisted, "with_lines", lambda run, memo, placement: run(None))
    assert reduced == timed()
