"""The tuner over slice shapes: without a topology it searches every legal slice of the chip count in one search
(256 TPUv4 chips: 4x4x16 and 4x8x8), names the shape of each mesh and of its choice, and the choice re-times on that
shape as the step it names (docs/workloads.md#the-autotuner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tpusim.api as tp
from tests.small_model import SMALL_MODEL_YAML
from tpusim.cli.main import main

SHAPES = ["4x4x16", "4x8x8"]  # every TPUv4 slice of 256 chips, sides ascending
# data-parallel layouts of a 1D algorithm: a few meshes per shape, each tune about a second
FIELDS: dict[str, object] = {"hardware": "tpuv4", "chips": 256, "algorithm": "tp1d", "ignore_memory": True}
# four replicas of a 2D mesh, where the shapes embed Cannon's 8x8 mesh differently (a few seconds a tune)
CANNON: dict[str, object] = {**FIELDS, "algorithm": "cannon", "dp": 4}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("shapes") / "small.yaml"
    path.write_text(SMALL_MODEL_YAML)
    return str(path)


@pytest.fixture(scope="module")
def joint(model: str) -> tp.TuneResult:
    return tp.tune(model=model, **FIELDS)


@pytest.fixture(scope="module")
def alone(model: str) -> dict[str, tp.TuneResult]:
    return {shape: tp.tune(model=model, topology=shape, **FIELDS) for shape in SHAPES}


@pytest.fixture(scope="module")
def sixteen(model: str) -> tp.TuneResult:
    """16 replicas: a data axis of 16 chips takes whole physical axes of 4x4x16 only, so the best is off the
    default shape (4x8x8), where re-timing without the shape could not even place it."""
    result = tp.tune(model=model, **{**FIELDS, "dp": 16})
    assert (result.best.mesh, result.best.slice_shape) == ("16x16x1", "4x4x16")
    return result


@pytest.fixture(scope="module")
def cannon(model: str) -> tuple[tp.TuneResult, dict[str, tp.TuneResult]]:
    return (tp.tune(model=model, **CANNON),
            {shape: tp.tune(model=model, topology=shape, **CANNON) for shape in SHAPES})


@pytest.mark.slow
def test_every_shape_s_meshes_are_reported_with_their_shape(joint: tp.TuneResult,
                                                            alone: dict[str, tp.TuneResult]) -> None:
    assert {m.slice_shape for m in joint.meshes} == set(SHAPES)
    for shape in SHAPES:
        # the joint search holds each shape's meshes as that shape's own search has them
        assert ({m.mesh for m in joint.meshes if m.slice_shape == shape}
                == {m.mesh for m in alone[shape].meshes})
    # the meshes stay plain "DxRxC" text, sorted by their sides, then by shape
    keys = [(tuple(int(v) for v in m.mesh.split("x")), m.slice_shape or "") for m in joint.meshes]
    assert keys == sorted(keys)
    assert joint.best.slice_shape in SHAPES
    assert all(c.slice_shape in SHAPES for c in joint.candidates)


@pytest.mark.parametrize("which", ["tp1d", "cannon"])
@pytest.mark.slow
def test_the_best_is_the_fastest_of_the_shapes_tuned_one_by_one(
        which: str, joint: tp.TuneResult, alone: dict[str, tp.TuneResult],
        cannon: tuple[tp.TuneResult, dict[str, tp.TuneResult]]) -> None:
    together, each = (joint, alone) if which == "tp1d" else cannon
    fastest = min(each.values(), key=lambda r: r.best.step_time_s)
    assert together.best.step_time_s == pytest.approx(fastest.best.step_time_s, rel=1e-12, abs=0)
    assert (together.best.mesh, together.best.slice_shape) == (fastest.best.mesh, fastest.best.slice_shape)


@pytest.mark.slow
def test_cannon_s_mesh_is_searched_on_both_shapes(cannon: tuple[tp.TuneResult, dict[str, tp.TuneResult]]) -> None:
    together, each = cannon
    simulated = {(m.mesh, m.slice_shape): m.simulated_step_s for m in together.meshes if m.status == "simulated"}
    assert set(simulated) == {("4x8x8", shape) for shape in SHAPES}
    for shape in SHAPES:  # the same mesh on another slice is another step
        assert simulated[("4x8x8", shape)] == pytest.approx(each[shape].best.step_time_s, rel=1e-12, abs=0)
    assert simulated[("4x8x8", "4x4x16")] != simulated[("4x8x8", "4x8x8")]


@pytest.mark.slow
def test_a_topology_given_is_the_only_shape_searched(alone: dict[str, tp.TuneResult]) -> None:
    for shape, result in alone.items():
        assert {m.slice_shape for m in result.meshes} == {shape}
        assert result.best.slice_shape == shape
        assert f"slice shape: {shape} (--topology)" in result.notes


@pytest.mark.slow
def test_the_note_names_the_shapes_searched(joint: tp.TuneResult) -> None:
    note = f"slice shapes searched: 4x4x16, 4x8x8; best on {joint.best.slice_shape}"
    assert note in joint.notes
    assert not any("not tried" in n for n in joint.notes)


def test_a_calibrated_profile_has_no_shape(model: str) -> None:
    result = tp.tune(model=model, hardware="meshslice-sim", chips=16, ignore_memory=True)
    assert result.best.slice_shape is None
    assert {m.slice_shape for m in result.meshes} == {None}
    assert "slice shape: none (a calibrated profile simulates one abstract ring per axis)" in result.notes


@pytest.mark.slow
def test_one_legal_shape_is_searched_alone(model: str) -> None:
    result = tp.tune(model=model, **{**FIELDS, "chips": 64})
    assert {m.slice_shape for m in result.meshes} == {"4x4x4"}
    assert "slice shape: 4x4x4 (the default for 64 chips)" in result.notes


def _step(model: str, result: tp.TuneResult, topology: str | None) -> tp.StepResult:
    best = result.best
    return tp.step(model=model, hardware="tpuv4", algorithm=best.algorithm, layout=best.layout,
                   topology=topology, batch=result.batch, recompute=result.recompute,
                   microbatches=result.microbatches, dataflows=best.dataflows, transposes=best.transposes,
                   slices=None if None in best.slices else best.slices, ignore_memory=True)


@pytest.mark.parametrize("which", ["tp1d", "sixteen", "cannon"])
@pytest.mark.slow
def test_the_choice_re_times_on_its_shape(which: str, model: str, joint: tp.TuneResult, sixteen: tp.TuneResult,
                                          cannon: tuple[tp.TuneResult, dict[str, tp.TuneResult]]) -> None:
    result = {"tp1d": joint, "sixteen": sixteen, "cannon": cannon[0]}[which]
    step = _step(model, result, result.best.slice_shape)
    assert step.step_time_s == pytest.approx(result.best.step_time_s, rel=1e-12, abs=0)


@pytest.mark.slow
def test_the_runner_up_may_be_the_same_mesh_on_the_other_shape(
        cannon: tuple[tp.TuneResult, dict[str, tp.TuneResult]]) -> None:
    best, runner = cannon[0].best, cannon[0].runner_up
    assert runner is not None and runner.mesh == best.mesh == "4x8x8"
    assert {best.slice_shape, runner.slice_shape} == set(SHAPES)


@pytest.mark.slow
def test_tpusim_step_on_the_chosen_shape_gives_the_tuned_step(model: str, sixteen: tp.TuneResult,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    joint = sixteen
    best = joint.best
    sides = best.mesh.split("x")
    argv = ["step", "--model", model, "--hardware", "tpuv4", "--algorithm", best.algorithm,
            "--mesh", "x".join(sides[-2:]), "--dp", sides[0] if len(sides) == 3 else "1",
            "--topology", str(best.slice_shape), "--batch", str(joint.batch), "--recompute", joint.recompute,
            "--microbatches", str(joint.microbatches), "--dataflows", ",".join(best.dataflows),
            "--transposes", ",".join(str(int(t)) for t in best.transposes), "--ignore-memory", "--json"]
    capsys.readouterr()
    assert main(argv) == 0
    step = json.loads(capsys.readouterr().out)
    assert step["step_time_s"] == pytest.approx(best.step_time_s, rel=1e-12, abs=0)


@pytest.mark.slow
def test_the_traced_best_is_placed_on_its_shape(model: str, tmp_path: Path) -> None:
    result = tp.tune(model=model, trace_best=str(tmp_path / "best.json"), **{**FIELDS, "dp": 16})
    assert result.best.slice_shape == "4x4x16"  # off the default shape, where the step could not be placed
    assert any(n.startswith(f"trace of the best choice ({result.best.mesh}): its step simulated again")
               and n.endswith("as in the search") for n in result.notes)


@pytest.mark.slow
def test_the_breakdown_family_re_times_a_choice_on_its_shape(model: str) -> None:
    from tpusim.config.requests import TuneRequest
    from tpusim.experiments.families.comparisons import BREAKDOWN
    from tpusim.experiments.runners import parse_request

    # wang: its best mesh, 256x1, is also its runner-up on the other shape (meshslice's 256x1 runs one slice, the
    # collective schedule, and its runner-up is another mesh)
    fields = {"kind": "tune", "model": model, **FIELDS, "algorithm": "wang", "dp": 1}
    point = parse_request(TuneRequest, fields).model_dump(mode="json")
    result = tp.tune(**{k: v for k, v in fields.items() if k != "kind"})
    runner = result.runner_up
    # the same mesh on the other shape: re-timed on the default shape it would be the best's step, not its own
    assert runner is not None and (runner.mesh, runner.slice_shape) == (result.best.mesh, "4x4x16")
    assert result.best.slice_shape == "4x8x8"
    entry = {"point": point, "result": {**result.to_dict(), "best": runner.to_dict()}, "error": None}
    step = next(row for row in BREAKDOWN.table([entry]) if row["part"] == "step")
    assert step["time_s"] == pytest.approx(runner.step_time_s, rel=1e-12, abs=0)
