"""Parameters shared by the GeMM algorithms and the prefetch policy (docs/algorithms.md#collective-2d-gemm)."""

from __future__ import annotations

from dataclasses import dataclass

from tpusim.config import HardwareProfile
from tpusim.vocabulary import Prefetch


def default_prefetch(hardware: HardwareProfile) -> Prefetch:
    """The profile's own default (``ideal`` on the calibrated profiles, ``previous-op`` on physical ones)."""
    return hardware.prefetch


@dataclass(frozen=True)
class GemmParams:
    """Algorithm parameters; ``slices`` only for algorithms that slice (MeshSlice)."""

    prefetch: Prefetch = Prefetch.IDEAL
    slices: int | None = None
    block: int = 8  # MeshSlice's strided-slice run length (hard-coded 8 in the artifact)
    variant: str | None = None
    compat_mean_overlap: bool = False  # the `simulation` branch's (a+b)/2 rule, twins only, labelled
