"""Training steps of a D x R x C layout: D = 1 is the plain step, symmetric equals full, the straggler reduction is
exact, the data-parallel collectives are those the ZeRO stage says, and memory per chip follows ZeRO.

The layouts are small (4x4 replicas on 4x4x4 and 4x4x8 slices of tpuv4) and the model a six-layer toy, so each
test simulates in about a second; the figures they check do not depend on the size.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

import tpusim.api as tp
import tpusim.model.step as step_module
from tests.panels import plan_panel_bytes
from tpusim.collectives.device import run_spmd
from tpusim.collectives.network import network_for, place_mesh
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.config import TransformerModel
from tpusim.engine.overrides import parse_slow_links
from tpusim.engine.simulation import Simulation
from tpusim.gemm.registry import get_algorithm
from tpusim.hardware import load_hardware
from tpusim.model.data_parallel import DataSyncOp
from tpusim.model.plan import plan_step
from tpusim.model.program import PrefetchWindow, step_program, step_sequence
from tpusim.model.replicas import replica_representatives
from tpusim.model.step import StepResult, StepSpec, simulate_step
from tpusim.topology import MeshMapping
from tpusim.topology.mapping import DATA_AXIS
from tpusim.vocabulary import CollectiveOp, Fidelity, Prefetch, Recompute

TPUV4 = load_hardware("tpuv4")
TINY = TransformerModel(name="tiny", description="test model", layers=6, hidden=512, heads=8, head_dim=64,
                        ffn=2048, sequence=64)
TINY16 = TransformerModel(name="tiny16", description="16 heads, for the 1D algorithms on 16 chips", layers=6,
                          hidden=512, heads=16, head_dim=32, ffn=2048, sequence=64)
BATCH = 32  # 8 sequences per replica at D = 4, 4 per micro-batch of 2: R = 4 divides both
STAGES = (0, 1, 2, 3)
BF16 = 2  # bytes of a gradient or weight element crossing the data axis


def _pod(data: int, rows: int = 4, cols: int = 4, topology: str | None = None) -> MeshMapping:
    return place_mesh(TPUV4, rows, cols, topology=topology, data=data)


# ---------------------------------------------------------------------------------------------- D = 1


@pytest.mark.parametrize("algorithm, extra", [("summa", {}), ("meshslice", {"slices": 2})])
@pytest.mark.slow
def test_one_replica_is_the_plain_step(algorithm: str, extra: dict[str, int]) -> None:
    common = {"model": "gpt3-175b", "hardware": "tpuv4", "algorithm": algorithm, "ignore_memory": True, **extra}
    plain = tp.step(mesh="4x4", **common).to_dict()
    assert (plain["data_parallel"], plain["zero_stage"], plain["layout"], plain["exposed_data_comm_s"]) == (
        1, None, "4x4", 0.0)
    assert "data" not in plain["mapping"] and "layout" not in plain["mapping"]
    assert tp.step(mesh="4x4", dp=1, **common).to_dict() == plain
    assert tp.step(mesh="1x4x4", zero_stage=3, **common).to_dict() == plain  # no replicas: nothing to shard


# ---------------------------------------------------------------------------------------------- symmetric = full

SYMMETRIC_CASES = [
    (algorithm, slices, stage, optimizer)
    for algorithm, slices in (("meshslice", (2, 2, 2, 2)), ("collective", None), ("wang", None))
    for stage in STAGES for optimizer in (False, True)
]


def _assert_same_step(a: StepResult, b: StepResult, rel: float) -> None:
    for name in ("step_time_s", "compute_s", "exposed_comm_s", "exposed_data_comm_s", "idle_s"):
        assert getattr(a, name) == pytest.approx(getattr(b, name), rel=rel, abs=1e-15), name


@pytest.mark.parametrize("algorithm, slices, stage, optimizer", SYMMETRIC_CASES)
@pytest.mark.slow
def test_symmetric_equals_full_on_a_pod(algorithm: str, slices: tuple[int, ...] | None, stage: int,
                                        optimizer: bool) -> None:
    mapping = _pod(4, topology="4x4x4")
    spec = StepSpec(TINY, get_algorithm(algorithm), BATCH, slices, zero_stage=stage, optimizer=optimizer,
                    microbatches=2)
    auto = simulate_step(spec, network_for(TPUV4, mapping))
    full = simulate_step(replace(spec, fidelity=Fidelity.FULL), network_for(TPUV4, mapping))
    assert (auto.fidelity, full.fidelity) == ("symmetric", "full")
    assert (auto.layout, auto.data_parallel, auto.zero_stage, auto.microbatches) == ("4x4x4", 4, stage, 2)
    _assert_same_step(auto, full, 1e-9)
    assert 0 <= auto.exposed_data_comm_s <= auto.exposed_comm_s


@pytest.mark.parametrize("algorithm, batch", [("tp1d", 64), ("fsdp", 128)])
@pytest.mark.parametrize("stage", [0, 3])
@pytest.mark.slow
def test_symmetric_equals_full_for_1d_replicas(algorithm: str, batch: int, stage: int) -> None:
    mapping = _pod(4, 16, 1, topology="4x4x4")
    spec = StepSpec(TINY16, get_algorithm(algorithm), batch, zero_stage=stage, optimizer=True, microbatches=2)
    auto = simulate_step(spec, network_for(TPUV4, mapping))
    full = simulate_step(replace(spec, fidelity=Fidelity.FULL), network_for(TPUV4, mapping))
    assert (auto.fidelity, auto.layout) == ("symmetric", "4x16x1")
    _assert_same_step(auto, full, 1e-9)


def test_data_exposure_is_part_of_the_exposed_time_and_zero_without_replicas() -> None:
    spec = StepSpec(TINY, get_algorithm("collective"), BATCH, zero_stage=3)
    alone = simulate_step(spec, network_for(TPUV4, place_mesh(TPUV4, 4, 4, topology="torus:4x4")))
    assert alone.exposed_data_comm_s == 0.0 and alone.exposed_comm_s > 0
    pod = simulate_step(spec, network_for(TPUV4, _pod(4, topology="4x4x4")))
    assert 0 < pod.exposed_data_comm_s <= pod.exposed_comm_s
    # the replica runs a quarter of the batch, so without the data axis its step would be shorter
    assert pod.step_time_s - pod.exposed_data_comm_s < alone.step_time_s


# ---------------------------------------------------------------------------------------------- stragglers


def _link_of_replica(mapping: MeshMapping, replica: int) -> int:
    """A tensor-axis (axis 0) link between two chips of ``replica``."""
    cols = mapping.shape[1]
    return mapping.axes[0].groups[replica * cols + 1].fwd_routes[0][0]


STRAGGLERS = {
    "one slow chip": ({(1, 2, 3): 1.5}, [], 1, False, 1),
    "slow chips in two replicas, ZeRO 3": ({(0, 0, 0): 1.3, (3, 1, 5): 2.0}, [], 3, False, 1),
    "slow chip, micro-batches and optimizer": ({(2, 3, 6): 1.5}, [], 2, True, 2),
    "slow tensor link in one replica": ({}, [2], 1, False, 1),
}


@pytest.mark.parametrize("name", list(STRAGGLERS))
@pytest.mark.slow
def test_simulating_the_touched_replicas_equals_simulating_every_chip(monkeypatch: pytest.MonkeyPatch,
                                                                      name: str) -> None:
    slow, links, stage, optimizer, microbatches = STRAGGLERS[name]
    mapping = _pod(8, topology="4x4x8")
    slowdown = {mapping.chip(*where): factor for where, factor in slow.items()}
    overrides = parse_slow_links([f"{_link_of_replica(mapping, replica)}:2" for replica in links], mapping)
    touched = {where[2] for where in slow} | set(links)
    spec = StepSpec(TINY, get_algorithm("collective"), 64, zero_stage=stage, optimizer=optimizer,
                    microbatches=microbatches)
    reduced = simulate_step(spec, network_for(TPUV4, mapping, link_overrides=overrides or None),
                            chip_slowdown=slowdown or None)
    kept = len(touched) + 1
    assert sum(note.startswith(f"{kept} of 8 replicas simulated") for note in reduced.notes) == 1
    monkeypatch.setattr(step_module, "replica_representatives", lambda *args: None)
    every = simulate_step(spec, network_for(TPUV4, mapping, link_overrides=overrides or None),
                          chip_slowdown=slowdown or None)
    assert not any("replicas simulated" in note for note in every.notes)
    assert every.fidelity == reduced.fidelity == "full"
    _assert_same_step(reduced, every, 1e-12)
    assert reduced.step_time_s > simulate_step(spec, network_for(TPUV4, mapping)).step_time_s  # the slowdown shows


@pytest.mark.parametrize("algorithm, stage, microbatches", [("summa", 1, 1), ("cannon", 3, 2), ("collective", 0, 2)])
@pytest.mark.slow
def test_one_replica_stands_for_all_in_a_full_run(monkeypatch: pytest.MonkeyPatch, algorithm: str, stage: int,
                                                  microbatches: int) -> None:
    mapping = _pod(4, topology="4x4x4")
    spec = StepSpec(TINY, get_algorithm(algorithm), BATCH, zero_stage=stage, optimizer=True, microbatches=microbatches,
                    fidelity=Fidelity.FULL)
    one = simulate_step(spec, network_for(TPUV4, mapping))
    assert sum(note.startswith("1 of 4 replicas simulated") for note in one.notes) == 1
    monkeypatch.setattr(step_module, "replica_representatives", lambda *args: None)
    every = simulate_step(spec, network_for(TPUV4, mapping))
    assert not any("replicas simulated" in note for note in every.notes)
    _assert_same_step(one, every, 1e-12)


@pytest.mark.slow
def test_a_slow_data_axis_link_simulates_every_replica() -> None:
    mapping = _pod(8, topology="4x4x8")
    links = parse_slow_links(["z:2"], mapping)
    data_links = {link for group in mapping.axes[DATA_AXIS].groups for link in group.fwd_routes[0]}
    assert data_links <= set(links)
    assert replica_representatives(mapping, None, links) is None
    one = {min(data_links): links[min(data_links)]}
    assert replica_representatives(mapping, {mapping.chip(0, 0, 1): 1.5}, one) is None
    result = simulate_step(StepSpec(TINY, get_algorithm("collective"), 64), network_for(TPUV4, mapping,
                                                                                        link_overrides=one))
    assert result.fidelity == "full"
    assert not any("replicas simulated" in note for note in result.notes)


# ---------------------------------------------------------------------------------------------- the collectives

LAYERS = 3


def _data_calls(stage: int, accumulating: bool) -> tuple[list[DataSyncOp], Counter[CollectiveOp], list[int]]:
    """The data-parallel ops of a 3-layer step sequence on 4 replicas of 4x4, and the data-axis collectives a full
    simulation of it ran: (ops in order, collectives per data group by operation, bytes each chip passed in)."""
    mapping = _pod(4, topology="4x4x4")
    spec = StepSpec(TINY, get_algorithm("collective"), BATCH // 4, zero_stage=stage, accumulating=accumulating)
    plan = plan_step(spec, mapping.shape, mapping.data, TPUV4.combine_threshold)
    sequence = step_sequence(plan, LAYERS)
    sim = Simulation(network_for(TPUV4, mapping))
    runtime = CollectiveRuntime(sim, network_for(TPUV4, mapping))
    run_spmd(sim, runtime, step_program, lambda dev: (sequence, plan.gemms, [], PrefetchWindow()))
    records = [record for record in runtime.records if record.call.axis == DATA_AXIS]
    groups = mapping.shape[0] * mapping.shape[1]
    assert Counter(record.group for record in records) == Counter({g: len(records) // groups for g in range(groups)})
    per_group = Counter(record.call.op for record in records if record.group == 0)
    passed = [record.call.nbytes for record in records]
    return [op for op, _ in sequence if isinstance(op, DataSyncOp)], per_group, passed


# (ZeRO stage, accumulating micro-step) -> the data-parallel collectives of each block, in program order:
# G: the block's gradient bucket, W: an all-gather of its weights
SYNCS = {
    (0, False): "G2 G1 G0",
    (1, False): "W0 W1 W2 G2 G1 G0",
    (2, False): "W0 W1 W2 G2 G1 G0",
    (3, False): "W0 W1 W2 W2 W1 G2 W0 G1 G0",
    (0, True): "",
    (1, True): "",
    (2, True): "G2 G1 G0",
    (3, True): "W0 W1 W2 W2 W1 G2 W0 G1 G0",
}


@pytest.mark.parametrize("stage, accumulating", list(SYNCS))
@pytest.mark.slow
def test_the_data_parallel_collectives_of_each_zero_stage(stage: int, accumulating: bool) -> None:
    ops, per_group, passed = _data_calls(stage, accumulating)
    assert " ".join(f"{'G' if op.name == 'dp.grads' else 'W'}{op.target}" for op in ops) == SYNCS[
        (stage, accumulating)]
    gradient_op = CollectiveOp.ALL_REDUCE if stage == 0 else CollectiveOp.REDUCE_SCATTER
    grads = sum(op.name == "dp.grads" for op in ops)
    gathers = sum(op.name == "dp.weights" for op in ops)
    assert all(op.collective is (gradient_op if op.name == "dp.grads" else CollectiveOp.ALL_GATHER) for op in ops)
    assert per_group == Counter({gradient_op: grads, CollectiveOp.ALL_GATHER: gathers}) - Counter()
    # each chip's shard of a block: params_per_layer / (R C) bf16 elements, gathered from D parts of a quarter
    shard = TINY.params_per_layer // 16 * BF16
    expected = sorted([shard] * grads * 16 + [shard // 4] * gathers * 16)
    assert sorted(passed) == expected


@pytest.mark.slow
def test_the_tied_embedding_syncs_once_around_the_step() -> None:
    mapping = _pod(4, topology="4x4x4")
    spec = StepSpec(TINY, get_algorithm("collective"), BATCH // 4, zero_stage=1, embedding=True, optimizer=True)
    plan = plan_step(spec, mapping.shape, mapping.data, TPUV4.combine_threshold)
    names = [f"{op.name}{getattr(op, 'target', '')}" for op, _ in step_sequence(plan, 2)]
    # gathered before the lookup; block 0's bucket leaves with QKV's gradients, before ln1's backward; the
    # embedding's once its own backward has run, before the update waits for all
    assert names[:4] == ["dp.weights-1", "dp.weights0", "dp.weights.wait-1", "embedding"]
    assert names[-7:] == ["dp.grads0", "ln1.norm.bwd", "ln1.psum.bwd", "embedding.bwd", "dp.grads-1",
                          "dp.grads.waitNone", "optimizer"]
    embedding = next(op for op, _ in step_sequence(plan, 2) if isinstance(op, DataSyncOp) and op.target == -1
                     and op.name == "dp.grads")
    tied = -(-TINY.vocabulary // (128 * 16)) * 128 * 16 * TINY.hidden // 16  # the padded vocabulary's share
    assert embedding.elements == -(-tied // 4) * 4
    auto = simulate_step(replace(spec, batch=BATCH), network_for(TPUV4, mapping))
    full = simulate_step(replace(spec, batch=BATCH, fidelity=Fidelity.FULL), network_for(TPUV4, mapping))
    _assert_same_step(auto, full, 1e-9)


# ---------------------------------------------------------------------------------------------- memory


def _expected_memory(data: int, stage: int) -> float:
    """Weights 2 B, gradients 2 B and optimizer state 12 B per parameter, sharded over the D replicas from the
    ZeRO stage on, over the R C = 16 chips of a replica; plus the activations of batch / D sequences with no
    recomputation, s b h (34 + 5 a s / h) per layer (Korthikanti et al. 2022), over the same 16 chips."""
    shard = 1 / data
    per_param = (2 * (shard if stage >= 3 else 1) + 2 * (shard if stage >= 2 else 1)
                 + 12 * (shard if stage >= 1 else 1))
    state = TINY.params_per_layer * TINY.layers * per_param / 16
    s, b, h, a = TINY.sequence, BATCH // data, TINY.hidden, TINY.heads
    activations = s * b * h * (34 + 5 * a * s / h) * TINY.layers / 16
    # the working set's transients (docs/workloads.md#working-set): two fp32 score-sized tensors (unfused), the
    # residual and widest gradients in bf16, and (a small block is one data-parallel collective, so the one in
    # flight beside it is the next block's) two gathered blocks under ZeRO 3 and two gradient buckets under 2 and 3
    tokens, wide = s * b, max(TINY.ffn, TINY.q_width + 2 * TINY.kv_width)
    held = 8 * a * s * tokens / 16 + 2 * tokens * (h + wide) / 16
    if data > 1 and stage >= 2:
        held += 2 * (2 * TINY.params_per_layer / 16) * (2 if stage >= 3 else 1)
    # and the GeMM panels of the collective 2D GeMM on 4 x 4 (tests/panels.py)
    held += plan_panel_bytes(TINY, "collective", BATCH // data, (4, 4), Prefetch.PREVIOUS_GEMM, Recompute.NONE)
    return state + activations + held


@pytest.fixture(scope="module")
def tiny_yaml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "tiny.yaml"
    path.write_text("".join(f"{key}: {value}\n" for key, value in TINY.model_dump().items()))
    return path


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.slow
def test_memory_per_chip_falls_with_the_replicas_as_the_zero_stage_says(tiny_yaml: Path, stage: int) -> None:
    seen = []
    for data in (1, 2, 4, 8):
        result = tp.step(model=str(tiny_yaml), hardware="tpuv4", mesh=f"{data}x4x4", batch=BATCH,
                         algorithm="collective", recompute="none", zero_stage=stage)
        assert (result.data_parallel, result.zero_stage, result.recompute) == (
            data, stage if data > 1 else None, str(Recompute.NONE))
        assert result.memory_bytes_per_chip == pytest.approx(_expected_memory(data, stage), rel=1e-12)
        seen.append(result.memory_bytes_per_chip)
    assert seen == sorted(seen, reverse=True) and seen[0] > seen[-1]


# ---------------------------------------------------------------------------------------------- documentation


def test_every_step_result_field_is_in_the_result_fields_table() -> None:
    text = (Path(__file__).parents[2] / "docs" / "results.md").read_text()
    table = text.split("### Step (`tpusim step`")[1].split("\n### ")[0]
    documented = {name for cell in re.findall(r"^\| ([^|]+) \|", table, re.MULTILINE)
                  for name in re.findall(r"`([a-z_]+)`", cell)}
    fields = {field.name for field in dataclasses.fields(StepResult)}
    assert fields - documented == set()
    assert "`mapping.data`" in text
