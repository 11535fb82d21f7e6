"""Which layouts a tuning search prices: every mesh of every searched slice shape and data degree (``space``), less
those that overflow HBM with their GeMM panels counted (``capacity``) and those whose simulation this machine
cannot hold; and the refusal that names the reasons when none is left."""

from __future__ import annotations

from collections.abc import Sequence

from tpusim.errors import InfeasibleError
from tpusim.model.program import PrefetchWindow
from tpusim.tuning.capacity import PanelLimit, host_shortfall, mesh_memory
from tpusim.tuning.mesh_search import MeshSearch
from tpusim.tuning.result import MeshReport
from tpusim.tuning.space import MeshCandidate, RejectedMesh, data_degrees, mesh_candidates, shown
from tpusim.tuning.spec import TUNED_DTYPE, Setting, TuneSpec
from tpusim.units import GB
from tpusim.vocabulary import Recompute

Limits = dict[tuple[str, str], PanelLimit]
"""The GeMM panels each admitted mesh's options may hold, by mesh key (``capacity.mesh_memory``)."""


class Overflowed(Exception):
    """Every layout overflowed HBM under an open recomputation and micro-batch ``choice`` once its own needs (its
    GeMM panels, its replicas' state) were counted: the next choice that fits is searched instead."""

    def __init__(self, error: InfeasibleError, choice: tuple[Recompute, int]) -> None:
        super().__init__(str(error))
        self.error = error
        self.choice = choice


def admitted(setting: Setting, notes: list[str]) -> tuple[list[MeshCandidate], list[RejectedMesh], Limits]:
    """The candidates that fit in HBM, every layout rejected so far and the candidates' panel limits. Refuses when
    no candidate is left, with ``Overflowed`` where the memory gate dropped them under an open choice."""
    request, micro = setting.request, setting.micro
    candidates: list[MeshCandidate] = []
    rejected: list[RejectedMesh] = []
    for shape in setting.shapes:
        for data in data_degrees(setting.chips, micro, setting.dp):
            found, skipped = mesh_candidates(request.transformer, setting.algorithm, setting.chips, micro,
                                             request.profile, shape, request.allow_infeasible, data)
            candidates += found
            rejected += skipped
    limits: Limits = {}
    kept = len(candidates)
    candidates, rejected = memory_gate(setting, candidates, rejected, notes, limits)
    if not candidates:
        if setting.open_choice and kept and not request.ignore_memory:  # more recomputation may fit
            raise Overflowed(no_mesh(request, micro, rejected),
                             (setting.memory.recompute, setting.memory.microbatches))
        raise no_mesh(request, micro, rejected)
    return candidates, rejected, limits


def memory_gate(setting: Setting, candidates: list[MeshCandidate], rejected: list[RejectedMesh], notes: list[str],
                limits: Limits) -> tuple[list[MeshCandidate], list[RejectedMesh]]:
    """Drop the meshes that overflow HBM (unless memory is ignored), with GeMM panels no less than those of any plan
    the search builds from the layer options each mesh's limit admits (``capacity.mesh_memory``; the limits go into
    ``limits`` by mesh key): a mesh kept never overflows with the plan chosen, whose exact figure the whole step
    reports. ``plan_memory`` has already refused a step that fits on no mesh even without panels, with the
    smallest shortfall and what would fit."""
    request, batch, reserved_bytes = setting.request, setting.micro, setting.budget
    window = PrefetchWindow(request.prefetch_window, reserved_bytes)
    estimates = []
    for c in candidates:
        estimate, limit = mesh_memory(request.transformer, c.mesh, batch, request.recompute, request.profile,
                                      request.bytes_per_param, reserved_bytes, c.data, request.stage,
                                      request.remat, algorithm=setting.algorithm,
                                      prefetch=setting.prefetch, window=window, dtype=TUNED_DTYPE,
                                      attention=request.attention, microbatches=request.microbatches or 1,
                                      ignore_memory=request.ignore_memory)
        limits[c.key] = limit
        estimates.append((estimate, c))
    if request.ignore_memory:
        over = [e for e, _ in estimates if not e.feasible]
        if over:
            worst = max(over, key=lambda e: e.total_bytes)
            notes.append(f"memory ignored: configurations need up to {worst.total_bytes / GB:.1f} GB per chip "
                         f"of {worst.capacity_bytes / GB:.1f} GB")
        return candidates, rejected
    fits = [c for e, c in estimates if e.feasible]
    dropped = [RejectedMesh(c.label, f"needs {e.total_bytes / GB:.1f} GB per chip of {e.capacity_bytes / GB:.1f} GB",
                            c.slice_shape) for e, c in estimates if not e.feasible]
    return fits, rejected + dropped


def simulable(searches: list[MeshSearch], rejected: list[RejectedMesh], notes: list[str]) -> list[MeshSearch]:
    """The searches whose simulations this machine can hold; the others join ``rejected`` (``host_shortfall``)."""
    kept = []
    for search in searches:
        shortfall = host_shortfall(search.candidate.mapping, search.full)
        if shortfall is None:
            kept.append(search)
        else:
            rejected.append(RejectedMesh(search.candidate.label, shortfall[1], search.candidate.slice_shape,
                                         host_bytes=shortfall[0]))
    if len(kept) < len(searches):
        notes.append(f"{len(searches) - len(kept)} layout(s) skipped: simulating them needs more memory than this "
                     "machine has (their reasons in meshes)")
    return kept


def unrefined(rejected: list[RejectedMesh], reports: dict[tuple[str, str], MeshReport]) -> list[RejectedMesh]:
    """The rejected layouts and every mesh whose refinement found no plan, as the refusal names them."""
    known = {r.key for r in rejected}
    return [*rejected, *(RejectedMesh(r.mesh, r.reason or "", r.slice_shape)
                         for key, r in reports.items() if key not in known)]


def no_mesh(request: TuneSpec, batch: int, rejected: Sequence[RejectedMesh]) -> InfeasibleError:
    """The refusal of a request no layout is left for, with the first reasons."""
    hosted = [r for r in rejected if r.host_bytes is not None]
    others = [r for r in rejected if r.host_bytes is None]
    reasons = "; ".join(f"{shown(r.mesh, r.slice_shape)}: {r.reason}" for r in others[:3])
    more = f" (and {len(others) - 3} more)" if len(others) > 3 else ""
    if hosted:  # the layouts that would run on a larger machine are the ones worth naming
        least = min(hosted, key=lambda r: (r.host_bytes or 0.0, r.mesh))
        more += (f"; {len(hosted)} other layout(s) need more memory to simulate than this machine has (the least, "
                 f"{shown(least.mesh, least.slice_shape)}: {least.reason})")
    return InfeasibleError(
        f"no feasible configuration of {request.transformer.name} with algorithm {request.algorithm!r} on "
        f"{request.chips} chips (batch {batch}): {reasons}{more}",
        "try another chip count, batch or algorithm, or --allow-infeasible to time infeasible meshes anyway",
    )
