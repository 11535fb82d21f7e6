"""``symmetric`` fidelity (one representative chip) equals ``full`` wherever ``auto`` claims it."""

from __future__ import annotations

from typing import Any

import pytest

from tpusim.collectives.factory import network_for
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import algorithms, get_algorithm
from tpusim.gemm.simulate import simulate_gemm
from tpusim.hardware import load_hardware
from tpusim.vocabulary import Dataflow, Fidelity

MESHES_2D = [(4, 4), (8, 4), (4, 8)]


def _cases() -> list[Any]:  # pytest.param sets
    cases = []
    for hardware in ("meshslice-tpu-fit", "tpuv4"):
        for name in algorithms():
            if name in ("tp1d", "fsdp"):
                meshes = [(8, 1), (16, 1)]
            elif name == "cannon":
                meshes = [(4, 4), (8, 8), (16, 16)]
            else:
                meshes = MESHES_2D
            variants = [None, "bidirectional-halves"] if name == "cannon" else [None]
            for mesh in meshes:
                for variant in variants:
                    slow = [pytest.mark.slow] if name == "cannon" and mesh != (4, 4) else []  # 1 to 6 s each
                    cases.append(pytest.param(hardware, name, mesh, variant, 2 if name == "meshslice" else None,
                                              marks=slow))
    return cases


@pytest.mark.parametrize(("hardware", "algorithm", "mesh", "variant", "slices"), _cases())
@pytest.mark.parametrize("dataflow", list(Dataflow))
def test_auto_equals_full(profile_mesh, hardware: str, algorithm: str, mesh: tuple[int, int], variant: str | None,
                          slices: int | None, dataflow: Dataflow) -> None:
    profile = load_hardware(hardware)
    _, mapping = profile_mesh(profile, *mesh)
    problem = GemmProblem(2048, 1024, 4096, dataflow)
    params = GemmParams(slices=slices, variant=variant)
    full = simulate_gemm(problem, get_algorithm(algorithm), params, network_for(profile, mapping),
                         fidelity=Fidelity.FULL)
    auto = simulate_gemm(problem, get_algorithm(algorithm), params, network_for(profile, mapping),
                         fidelity=Fidelity.AUTO)
    assert auto.time_s == pytest.approx(full.time_s, rel=1e-9)
    assert auto.compute_s == pytest.approx(full.compute_s, rel=1e-9)
    assert auto.exposed_comm_s == pytest.approx(full.exposed_comm_s, rel=1e-9, abs=1e-15)
    # auto is symmetric exactly where the algorithm schedules every chip alike
    expected = "symmetric"
    if profile.kind != "calibrated" and (algorithm == "summa" or (algorithm == "cannon" and variant is None)):
        expected = "full"
    assert auto.fidelity == expected
