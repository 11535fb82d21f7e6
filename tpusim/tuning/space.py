"""The tuner's search space: mesh shapes of the chip count and per-FF-layer options, with feasibility.

A candidate mesh is any factorisation R x C = P (not only powers of two) that the algorithm can run on:
2D algorithms need C | heads and R | batch (unless infeasible configurations are allowed), 1D algorithms
run on P x 1 only, and on a physical profile the logical mesh must map onto the topology. With data
parallelism a candidate is a layout D x R x C = P: D replicas (D | batch, the data axis on whole physical axes,
``tpusim.topology.pod``) of an R x C mesh that trains batch / D sequences. A layer option
is a dataflow, a transposition flag and, for MeshSlice, a slice count K taken from every feasible value
(``GemmAlgorithm.slice_options``, common to the layer's three passes), never from a table.
Every option is confirmed by the algorithm's own feasibility check on all three passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from tpusim.collectives.factory import place_mesh
from tpusim.config import HardwareProfile, TransformerModel
from tpusim.errors import InfeasibleError, TopologyError
from tpusim.gemm.algorithm import GemmAlgorithm
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.simulate import check_gemm
from tpusim.model.feasibility import split_for
from tpusim.model.layer import FFLayer, Pass
from tpusim.topology import MeshMapping
from tpusim.vocabulary import Dataflow


@dataclass(frozen=True)
class LayerOption:
    """How one FF layer runs: its dataflow, whether its mesh axes are swapped, and its slice count."""

    dataflow: Dataflow
    transpose: bool
    slices: int | None

    def describe(self) -> str:
        k = "" if self.slices is None else f" S={self.slices}"
        return f"{self.dataflow}{' T' if self.transpose else ''}{k}"


@dataclass(frozen=True)
class MeshCandidate:
    """One feasible logical mesh and the layouts its activations may take.

    ``transposed_ok``: whether activations may sit in the transposed layout (tokens over axis 1, features
    over axis 0), which needs R | heads and C | batch; an RS layer produces that layout.
    """

    rows: int
    cols: int
    mapping: MeshMapping  # the whole layout; its ``tensor_mapping`` is one replica's R x C mesh
    transposed_ok: bool
    data: int = 1  # data-parallel replicas D
    slice_shape: str | None = None  # the slice it is placed on (topology text); None on a calibrated profile

    @property
    def mesh(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def label(self) -> str:
        """``"RxC"``, or ``"DxRxC"`` with data parallelism."""
        return f"{self.data}x{self.rows}x{self.cols}" if self.data > 1 else f"{self.rows}x{self.cols}"

    @property
    def key(self) -> tuple[str, str]:
        """What identifies the candidate in a search over several slice shapes (``mesh_key``)."""
        return mesh_key(self.label, self.slice_shape)


@dataclass(frozen=True)
class RejectedMesh:
    """A factorisation the search skipped, and why."""

    mesh: str
    reason: str
    slice_shape: str | None = None
    host_bytes: float | None = None  # what simulating it needs, where this machine cannot (``capacity``)

    @property
    def key(self) -> tuple[str, str]:
        return mesh_key(self.mesh, self.slice_shape)


def mesh_key(mesh: str, slice_shape: str | None) -> tuple[str, str]:
    """What identifies a mesh in a search over several slice shapes: (slice shape, mesh label); one logical mesh
    is a candidate of its own on each shape."""
    return (slice_shape or "", mesh)


def shown(mesh: str, slice_shape: str | None) -> str:
    """A mesh as notes and errors name it, on its slice shape where one is given (``"16x16 on 4x4x16"``)."""
    return mesh if slice_shape is None else f"{mesh} on {slice_shape}"


def factorisations(chips: int) -> list[tuple[int, int]]:
    """Every (R, C) with R x C = chips, R ascending."""
    return [(r, chips // r) for r in range(1, chips + 1) if chips % r == 0]


def data_degrees(chips: int, batch: int, dp: int | None) -> list[int]:
    """The data-parallel degrees D a search considers: ``dp`` alone when given, else every D dividing both the
    chips and the batch."""
    if dp is not None:
        return [dp]
    return [d for d in range(1, chips + 1) if chips % d == 0 and batch % d == 0]


Placed = dict[tuple[int, int, int, str | None], MeshMapping | TopologyError]
"""Layouts already placed, by (rows, cols, data, topology): their mapping or why there is none."""


def mesh_candidates(model: TransformerModel, algorithm: GemmAlgorithm, chips: int, batch: int,
                    hardware: HardwareProfile, topology: str | None, allow_infeasible: bool,
                    data: int = 1, placed: Placed | None = None) -> tuple[list[MeshCandidate], list[RejectedMesh]]:
    """The meshes (layouts of ``data`` replicas when > 1, each training batch / data) worth pricing, and the ones
    skipped with their reasons; both carry ``topology`` as their slice shape. ``placed`` keeps the mappings made
    for a later call (a search tries its layouts under several micro-batch counts)."""
    placed = placed if placed is not None else {}
    two_d = algorithm.parallelism == "2d"
    group = chips // data
    shapes = factorisations(group) if two_d else [(group, 1)]
    kept: list[MeshCandidate] = []
    rejected: list[RejectedMesh] = []
    share = batch // data
    for rows, cols in shapes:
        label = f"{data}x{rows}x{cols}" if data > 1 else f"{rows}x{cols}"
        try:
            split_for(model, (rows, cols), share, algorithm.parallelism, allow_infeasible)
        except InfeasibleError as error:
            rejected.append(RejectedMesh(label, error.message, topology))
            continue
        key = (rows, cols, data, topology)
        if key not in placed:
            try:
                placed[key] = place_mesh(hardware, rows, cols, topology=topology, data=data)
            except TopologyError as error:
                placed[key] = error
        mapping = placed[key]
        if isinstance(mapping, TopologyError):
            rejected.append(RejectedMesh(label, mapping.message, topology))
            continue
        # The transposed layout splits heads over axis 0 and sequences over axis 1: the swapped mesh's rules.
        swapped = split_for(model, (cols, rows), share, algorithm.parallelism, True)
        transposed_ok = two_d and (allow_infeasible or not swapped.violations)
        kept.append(MeshCandidate(rows, cols, mapping, transposed_ok, data, topology))
    return kept, rejected


def slice_counts(algorithm: GemmAlgorithm, problems: list[GemmProblem], mesh: tuple[int, int],
                 base: GemmParams) -> list[int]:
    """The slice counts every pass of a layer can run with (one count serves its three GeMMs), ascending."""
    common: set[int] | None = None
    for problem in problems:
        found = set(algorithm.slice_options(problem, mesh, base) or ())
        common = found if common is None else common & found
    return sorted(common or ())


def layer_problems(layer: FFLayer, option: LayerOption, dtype: str) -> dict[Pass, GemmProblem]:
    """The forward, backward-data and backward-weight GeMMs of a layer run with ``option``."""
    shaped = replace(layer, dataflow=option.dataflow, transpose=option.transpose)
    return {which: shaped.gemm(which, dtype) for which in Pass}


def layer_options(layer: FFLayer, algorithm: GemmAlgorithm, mesh: tuple[int, int], transpose: bool,
                  dataflows: tuple[Dataflow, ...], base: GemmParams, dtype: str) -> list[LayerOption]:
    """Every feasible option of ``layer`` on ``mesh`` with the given transposition flag."""
    options: list[LayerOption] = []
    for dataflow in dataflows:
        probe = LayerOption(dataflow, transpose, None)
        problems = list(layer_problems(layer, probe, dtype).values())
        if algorithm.uses_slices:
            options.extend(LayerOption(dataflow, transpose, params.slices)
                           for params in feasible_slices(algorithm, problems, mesh, base))
        elif runs(algorithm, problems, mesh, replace(base, slices=None)):
            options.append(LayerOption(dataflow, transpose, None))
    return options


def feasible_slices(algorithm: GemmAlgorithm, problems: Sequence[GemmProblem], mesh: tuple[int, int],
                    base: GemmParams) -> list[GemmParams]:
    """``base`` at each slice count (ascending) with which every one of ``problems`` runs on ``mesh``."""
    every = (replace(base, slices=k) for k in slice_counts(algorithm, list(problems), mesh, base))
    return [params for params in every if runs(algorithm, problems, mesh, params)]


def runs(algorithm: GemmAlgorithm, problems: Sequence[GemmProblem], mesh: tuple[int, int],
         params: GemmParams) -> bool:
    """Whether every one of ``problems`` passes the algorithm's feasibility rules on ``mesh`` with ``params``."""
    try:
        for problem in problems:
            check_gemm(algorithm, problem, mesh, params)
    except InfeasibleError:
        return False
    return True
