"""Default dataflows the algorithm can run: where the heuristic's dataflow breaks the algorithm's rules on the mesh
(a ``tp1d`` ring cuts the tokens into two pieces per chip), the layer takes the runnable dataflow that keeps the
largest matrix in place, and the step is the one those dataflows give when asked for explicitly
(docs/workloads.md#the-training-step)."""

from __future__ import annotations

import pytest

import tpusim.api as tp
from tpusim.config import TransformerModel
from tpusim.errors import InfeasibleError
from tpusim.topology.slices import slice_shape_for

# 4 x 64 = 256 tokens: not a multiple of 24 (two pieces per chip of a 12-chip ring), so rs (which cuts the tokens)
# cannot run; hidden 768 and ffn 3072 are multiples of 24, so os and ls (which cut the features) can
MODEL = TransformerModel(name="narrow", description="test model", layers=4, hidden=768, heads=12, head_dim=64,
                         ffn=3072, sequence=64)
FIELDS = {"model": MODEL, "hardware": "tpuv4", "topology": "mesh:12x1", "mesh": "12x1", "algorithm": "tp1d",
          "batch": 4, "ignore_memory": True}


def _heuristic(tokens: int, inputs: int, outputs: int) -> str:
    if outputs > inputs and tokens >= inputs:
        return "os"
    if inputs >= outputs and tokens >= outputs:
        return "ls"
    return "rs"


@pytest.mark.slow
def test_a_layer_the_heuristic_cannot_run_keeps_the_largest_runnable_matrix_in_place() -> None:
    tokens = 4 * 64
    # (inputs, outputs) of qkv, out_proj, ff1, ff2: with 256 tokens the heuristic keeps W in place (rs) everywhere
    shapes = [(768, 3 * 768), (768, 768), (768, 3072), (3072, 768)]
    assert [_heuristic(tokens, i, o) for i, o in shapes] == ["rs"] * 4
    # rs cannot run; of os (Y: tokens x outputs) and ls (X: tokens x inputs) the larger matrix stays, os on a tie
    expected = ["ls" if i > o else "os" for i, o in shapes]
    assert expected == ["os", "os", "os", "ls"]
    chosen = tp.step(**FIELDS)
    assert chosen.dataflows == expected
    asked = tp.step(**FIELDS, dataflows=expected)
    assert chosen.to_dict() == asked.to_dict()


def test_the_heuristic_dataflow_asked_for_is_still_refused() -> None:
    with pytest.raises(InfeasibleError, match="must be a multiple of 24"):
        tp.step(**FIELDS, dataflows=["rs"] * 4)


@pytest.mark.slow
def test_a_runnable_heuristic_is_kept() -> None:
    # 6 x 64 = 384 tokens divide into 24 pieces: the heuristic's rs runs and is kept
    assert tp.step(**{**FIELDS, "batch": 6}).dataflows == ["rs", "rs", "rs", "rs"]


@pytest.mark.parametrize("chips, shape", [(3072, "12x16x16"), (192, "4x4x12"), (64, "4x4x4"), (2048, "8x16x16"),
                                          (100, None), (8192, None)])
def test_the_most_cube_like_slice_of_whole_cubes(chips: int, shape: str | None) -> None:
    """TPUv4: the default where there is one; else the whole-cube slice whose longest side over its shortest is
    least (3072 = 48 cubes: 3 x 4 x 4 cubes beats 2 x 4 x 6 and 1 x 6 x 8); beyond a pod or not whole cubes, none."""
    assert slice_shape_for(chips) == shape
