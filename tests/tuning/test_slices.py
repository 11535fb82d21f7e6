"""``step`` without ``--slices``: each FF layer takes its fastest feasible slice count on the given mesh."""

from __future__ import annotations

import pytest

import tpusim.api as tp
from tpusim.config import TransformerModel
from tpusim.errors import InfeasibleError

TINY = TransformerModel(name="tiny", description="test model", layers=4, hidden=1024, heads=8, head_dim=128,
                        ffn=4096, sequence=64)


def test_tuned_slices_beat_every_uniform_choice() -> None:
    tuned = tp.step(model=TINY, hardware="meshslice-sim", mesh="4x4", algorithm="meshslice", batch=8)
    assert all(isinstance(k, int) and k >= 1 for k in tuned.slices)
    # hidden 1024 / (lcm(4,4) x 8) = 32 and tokens 512 / 32 = 16 (the RS-sliced out-projection): K in 1..16
    for k in (1, 2, 4, 8, 16):
        uniform = tp.step(model=TINY, hardware="meshslice-sim", mesh="4x4", algorithm="meshslice", batch=8,
                          slices=k)
        assert tuned.step_time_s <= uniform.step_time_s * (1 + 1e-12)
    with pytest.raises(InfeasibleError, match="--slices 32"):
        tp.step(model=TINY, hardware="meshslice-sim", mesh="4x4", algorithm="meshslice", batch=8, slices=32)
