"""Models of an experiment file (``experiments/<name>/experiment.yaml``): one point and a sweep over it.

``point`` holds every setting of one simulation: the request (``tpusim.config.requests``) of its ``kind``
(step, gemm, collective or tune), with exactly the fields that request has. ``sweep.grid`` maps dotted keys
of the point (``algorithm``, ``scale.beta``) to lists; the points are their cartesian product in the order
written (the last key varies fastest), minus ``exclude`` matches, plus ``include`` points appended at the end.
With no grid and an ``include`` list, the include list alone is the sweep.
"""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import Field, model_validator

from tpusim.config.loader import WHOLE_NUMBER, FrozenModel
from tpusim.config.requests import PointRequest

Count = Annotated[int, WHOLE_NUMBER, Field(ge=1)]

Point = PointRequest
"""One simulation: the request of its ``kind`` (collective, gemm, step or tune; default step)."""


class Sweep(FrozenModel):
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    include: list[dict[str, Any]] = Field(default_factory=list)
    exclude: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _lists_are_not_empty(self) -> Self:
        for key, values in self.grid.items():
            if not values:
                raise ValueError(f"sweep list {key!r} is empty; give at least one value or remove the key")
        return self


class Experiment(FrozenModel):
    """An experiment file."""

    name: str = Field(min_length=1)
    description: str = ""
    point: PointRequest
    sweep: Sweep = Field(default_factory=Sweep)
    max_points: Count = 1000
    """Sweeps larger than this need --yes."""
