"""The search space: every factorisation, feasibility rules, and every feasible slice count."""

from __future__ import annotations

import pytest

from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import get_algorithm
from tpusim.hardware import load_hardware
from tpusim.model.layer import ff_layers
from tpusim.model.registry import load_model
from tpusim.tuning.space import factorisations, layer_options, mesh_candidates
from tpusim.vocabulary import Dataflow


def test_factorisations_are_all_divisor_pairs() -> None:
    assert factorisations(12) == [(1, 12), (2, 6), (3, 4), (4, 3), (6, 2), (12, 1)]


def test_non_power_of_two_meshes_are_candidates() -> None:
    model, hardware = load_model("gpt3-175b"), load_hardware("meshslice-sim")
    kept, rejected = mesh_candidates(model, get_algorithm("meshslice"), 96, 96, hardware, None, False)
    labels = {c.label for c in kept}
    assert {"12x8", "8x12", "3x32", "24x4"} <= labels
    assert not rejected  # 96 heads and 96 sequences: every factorisation of 96 is feasible


def test_head_and_batch_rules_reject_with_reasons() -> None:
    model, hardware = load_model("gpt3-175b"), load_hardware("meshslice-sim")
    kept, rejected = mesh_candidates(model, get_algorithm("meshslice"), 256, 256, hardware, None, False)
    assert {c.label for c in kept} == {"256x1", "128x2", "64x4", "32x8", "16x16", "8x32"}
    reasons = {r.mesh: r.reason for r in rejected}
    assert "heads" in reasons["4x64"]  # the authors' tuner scored this one although 64 does not divide 96


def test_one_d_algorithms_have_a_single_shape() -> None:
    model, hardware = load_model("gpt3-175b"), load_hardware("meshslice-sim")
    tp1d = get_algorithm("tp1d")
    # the tuner follows the algorithm's declared parallelism; declare it here whatever the registry says
    line = type("Line", (type(tp1d),), {"parallelism": "1d-feature"})()
    kept, _ = mesh_candidates(model, line, 32, 32, hardware, None, False)
    assert [c.label for c in kept] == ["32x1"]


def test_unmappable_physical_meshes_are_skipped() -> None:
    model, hardware = load_model("gpt3-175b"), load_hardware("tpuv4")
    kept, rejected = mesh_candidates(model, get_algorithm("meshslice"), 36, 36, hardware, "torus:6x6", False)
    assert {c.label for c in kept} == {"36x1", "18x2", "12x3", "6x6", "3x12"}
    assert any(r.mesh == "9x4" and "cannot be mapped" in r.reason for r in rejected)


@pytest.mark.parametrize(("mesh", "expected"), [((32, 8), [1, 2, 3, 4, 6, 8, 12, 16, 24, 48]),
                                                ((12, 8), [1, 2, 4, 8, 16, 32, 64])])
def test_every_feasible_slice_count_is_offered(mesh: tuple[int, int], expected: list[int]) -> None:
    # QKV as OS slices the hidden size 12288: K must divide 12288 / (lcm(R, C) x 8)
    model = load_model("gpt3-175b")
    qkv = ff_layers(model, mesh[0] * 2048 * 8)[0]
    options = layer_options(qkv, get_algorithm("meshslice"), mesh, False, (Dataflow.OS,), GemmParams(), "bf16")
    assert [o.slices for o in options] == expected


def test_algorithms_without_slices_have_one_option_per_dataflow() -> None:
    model = load_model("gpt3-175b")
    qkv = ff_layers(model, 256 * 2048)[0]
    options = layer_options(qkv, get_algorithm("collective"), (32, 8), True, tuple(Dataflow), GemmParams(), "bf16")
    assert [(o.dataflow, o.transpose, o.slices) for o in options] == [(d, True, None) for d in Dataflow]
