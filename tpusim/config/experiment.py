"""Models of an experiment file (``experiments/<family>/experiment.yaml``): one point and a sweep over it.

``point`` holds every setting of one simulation: what to run (``kind``: step, gemm, collective or tune),
on what (hardware, topology, chips, mesh), with what (model, algorithm and its parameters, batch, fidelity,
overrides, calibration scaling). ``sweep.grid`` maps dotted keys of the point (``algorithm``,
``scale.beta``) to lists; the points are their cartesian product in the order written (the last key
varies fastest), minus ``exclude`` matches, plus ``include`` points appended at the end. With no grid and an
``include`` list, the include list alone is the sweep.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from tpusim.config.loader import FrozenModel

Count = Annotated[int, Field(ge=1)]
Factor = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class Overrides(FrozenModel):
    """What-if settings: straggler chips (``"3,5:1.5"``) and slow links (``"axis1:2"``), as on the CLI."""

    slow_chips: list[str] = Field(default_factory=list)
    slow_links: list[str] = Field(default_factory=list)


class Scale(FrozenModel):
    """Multipliers on the hardware profile's constants (sensitivity studies)."""

    alpha: Factor = 1.0
    lambda_: Factor = Field(1.0, alias="lambda")
    beta: Factor = 1.0
    flops: Factor = 1.0

    model_config = FrozenModel.model_config | {"populate_by_name": True}


class Point(FrozenModel):
    """One simulation. Fields a kind does not use must stay at their defaults."""

    kind: Literal["step", "gemm", "collective", "tune"] = "step"
    hardware: str
    topology: str | None = None
    axis_map: str | None = None
    chips: Count | None = None
    mesh: str | None = None
    model: str | None = None
    algorithm: str = "meshslice"
    slices: Count | list[Count] | None = None
    dataflows: list[Literal["os", "ls", "rs"]] | None = None
    transposes: list[bool] | None = None
    variant: str | None = None
    batch: Count | None = None
    prefetch: Literal["none", "previous-op", "ideal"] | None = None
    fidelity: Literal["auto", "full", "symmetric", "analytic"] = "auto"
    recompute: Literal["none", "selective", "full"] = "none"
    bytes_per_param: Factor = 16.0
    ignore_memory: bool = False
    allow_infeasible: bool = False
    exhaustive: bool = False
    embedding: bool = False
    optimizer: bool = False
    overrides: Overrides = Field(default_factory=Overrides)
    scale: Scale = Field(default_factory=Scale)
    # kind: gemm
    dataflow: Literal["os", "ls", "rs"] | None = None
    m: Count | None = None
    n: Count | None = None
    k: Count | None = None
    transpose: bool = False
    # kind: collective
    op: str | None = None
    axis: Literal[0, 1] | None = None
    bytes: str | Count | None = None
    chunks: Count = 1
    ring: Literal["bi", "uni"] = "bi"

    @model_validator(mode="after")
    def _kind_has_its_fields(self) -> Self:
        needed = {
            "step": ("model", "mesh"),
            "tune": ("model", "chips"),
            "gemm": ("mesh", "dataflow", "m", "n", "k"),
            "collective": ("mesh", "op", "axis", "bytes"),
        }[self.kind]
        missing = [name for name in needed if getattr(self, name) is None]
        if missing:
            raise ValueError(f"kind {self.kind!r} needs {', '.join(missing)}")
        return self


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
    point: Point
    sweep: Sweep = Field(default_factory=Sweep)
    max_points: Count = 1000
    """Sweeps larger than this need --yes."""
