"""On a 1 x 1 tensor mesh (pure data or FSDP layouts) every GeMM is a local product, so SUMMA's rotating roots and
Cannon's skews have nothing to rotate or skew: ``auto`` runs them symmetric, and the step equals the full-fidelity
step field for field (the fidelity and its note aside)."""

from __future__ import annotations

import pytest

import tpusim.api as tp
from tpusim.config import TransformerModel

TINY = TransformerModel(name="tiny", description="test model", layers=4, hidden=1024, heads=16, head_dim=64,
                        ffn=4096, sequence=64)


@pytest.mark.parametrize("algorithm", ["summa", "cannon"])
@pytest.mark.parametrize("layout", ["fsdp=64", "data=64"])
def test_position_dependent_algorithms_run_symmetric_on_one_chip_meshes(algorithm: str, layout: str) -> None:
    fields = {"model": TINY, "hardware": "tpuv4", "batch": 64, "topology": "4x4x4", "layout": layout,
              "algorithm": algorithm}
    auto = tp.step(**fields).to_dict()
    full = tp.step(fidelity="full", **fields).to_dict()
    assert (auto["fidelity"], full["fidelity"]) == ("symmetric", "full")
    assert {key: value for key, value in auto.items() if key not in {"fidelity", "notes"}} == {
        key: value for key, value in full.items() if key not in {"fidelity", "notes"}}


def test_a_wider_mesh_still_runs_summa_at_full_fidelity() -> None:
    result = tp.step(model=TINY, hardware="tpuv4", batch=64, topology="4x4x4", layout="data=16,tensor=4",
                     algorithm="summa")
    assert result.fidelity == "full"
