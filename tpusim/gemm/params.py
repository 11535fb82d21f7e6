"""Parameters shared by the GeMM algorithms and the prefetch policy (docs/algorithms.md#collective-2d-gemm)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType

from tpusim.config import HardwareProfile
from tpusim.vocabulary import Prefetch


def default_prefetch(hardware: HardwareProfile) -> Prefetch:
    """The profile's own default (``ideal`` on the calibrated profiles, ``previous-op`` on physical ones)."""
    return hardware.prefetch


REFUSED = "refused"
"""Metadata of a ``GemmParams`` field that an algorithm not declaring it refuses (others ignore it)."""


@dataclass(frozen=True)
class GemmParams:
    """Algorithm parameters: ``prefetch`` for every algorithm, the others for those that declare them
    (``GemmAlgorithm.takes``)."""

    prefetch: Prefetch = Prefetch.IDEAL
    slices: int | None = field(default=None, metadata={REFUSED: True})  # a count only a sliced schedule has
    block: int = 8  # MeshSlice's strided-slice run length (hard-coded 8 in the artifact)
    variant: str | None = None  # checked against the algorithm's own ``variants``
    compat_mean_overlap: bool = False  # the `simulation` branch's (a+b)/2 rule, twins only, labelled


ALGORITHM_PARAMETERS = MappingProxyType({f.name: bool(f.metadata.get(REFUSED)) for f in fields(GemmParams)
                                         if f.name != "prefetch"})
"""The parameters an algorithm may declare, each with whether one that does not declare it refuses it."""
