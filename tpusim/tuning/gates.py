"""Which layouts a tuning search prices: every mesh of every searched slice shape and data degree (``space``), less
those that overflow HBM with their GeMM panels counted (``capacity``) and those whose simulation this machine
cannot hold; and the refusal that names the reasons when none is left."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from tpusim.errors import InfeasibleError
from tpusim.model.memory import MemoryEstimate, MemoryPlan, microbatches_text
from tpusim.model.program import PrefetchWindow
from tpusim.tuning.capacity import PanelLimit, host_shortfall, mesh_memory
from tpusim.tuning.mesh_search import MeshSearch
from tpusim.tuning.notes import NAMED_MESHES, MeshNames
from tpusim.tuning.result import MeshReport
from tpusim.tuning.space import MeshCandidate, Placed, RejectedMesh, data_degrees, mesh_candidates, shown
from tpusim.tuning.spec import TUNED_DTYPE, Setting, TuneSpec
from tpusim.units import GB
from tpusim.vocabulary import Recompute

Limits = dict[tuple[str, str], PanelLimit]
"""The GeMM panels each admitted mesh's options may hold, by mesh key (``capacity.mesh_memory``)."""

Memories = dict[tuple[str, str], MemoryPlan]
"""The recomputation and micro-batch count each admitted layout is searched with, by mesh key."""


def memory_choices(setting: Setting) -> Iterator[MemoryPlan]:
    """The open choices of recomputation and micro-batches in ``plan_memory``'s order (the least recomputation,
    then the fewest micro-batches), each fitting at least the smallest data-parallel degree without panels; only
    the first where the request fixed both, or memory is ignored."""
    memory = setting.memory
    past: set[tuple[Recompute, int]] = set()
    while True:
        yield memory
        if not setting.open_choice or setting.request.ignore_memory:
            return
        past.add((memory.recompute, memory.microbatches))
        try:
            memory = setting.fit(frozenset(past))
        except InfeasibleError:
            return


class Admission:
    """The layouts one search admits, each under the first memory choice that fits it once its own needs (its GeMM
    panels, its replicas' state) are counted: a layout that overflows under one choice is tried under the next,
    until every layout fits or cannot (fewer sequences per micro-batch leave fewer meshes legal, and a layout whose
    model state alone overflows never fits). What is rejected keeps its first reason, or its last where both are
    memory's (the least shortfall)."""

    def __init__(self, setting: Setting) -> None:
        self.setting = setting
        self.candidates: list[MeshCandidate] = []
        self.limits: Limits = {}
        self.memories: Memories = {}
        self.choices: list[tuple[MemoryPlan, list[MeshCandidate]]] = []  # each choice tried and what it admitted
        self._reasons: dict[tuple[str, str], RejectedMesh] = {}  # by key, in the order first rejected
        self._over: dict[tuple[str, str], tuple[MeshCandidate, MemoryPlan, bool]] = {}  # (choice, exact figure)
        self._hopeless: set[tuple[str, str]] = set()  # model state alone overflows: no choice fits
        self._placed: Placed = {}  # the layouts' mappings, made once across choices

    @property
    def rejected(self) -> list[RejectedMesh]:
        """Every layout skipped: those the mesh rules or the topology refused, then those memory did."""
        memory = [r for key, r in self._reasons.items() if key in self._over]
        return [r for key, r in self._reasons.items() if key not in self._over] + memory

    def admit(self, memory: MemoryPlan, notes: list[str]) -> bool:
        """Admit what fits under ``memory`` of the layouts not admitted yet; whether any overflowed that a later
        choice may fit."""
        setting, request = self.setting, self.setting.request
        micro = setting.micro_of(memory)
        found: list[MeshCandidate] = []
        for shape in setting.shapes:
            for data in data_degrees(setting.chips, micro, setting.dp):
                legal, skipped = mesh_candidates(request.transformer, setting.algorithm, setting.chips, micro,
                                                 request.profile, shape, request.allow_infeasible, data,
                                                 placed=self._placed)
                found += [c for c in legal if c.key not in self.memories and c.key not in self._hopeless]
                for refused in skipped:  # a layout admitted under an earlier choice stays admitted
                    if refused.key not in self.memories:
                        self._reasons.setdefault(refused.key, refused)
        fits = memory_gate(setting, memory, found, notes, self.limits, self)
        for candidate in fits:
            self.memories[candidate.key] = memory
            self._reasons.pop(candidate.key, None)
            self._over.pop(candidate.key, None)
        self.candidates += fits
        self.choices.append((memory, fits))
        return any(c.key in self._over and c.key not in self._hopeless for c in found)

    def overflowed(self, candidate: MeshCandidate, memory: MemoryPlan, estimate: MemoryEstimate, exact: bool) -> None:
        """Record that ``candidate`` does not fit under ``memory`` (``estimate``: its needs, panels counted where
        ``exact``)."""
        key = candidate.key
        if key in self._reasons and key not in self._over:
            return  # a reason other than memory came first
        self._reasons[key] = RejectedMesh(candidate.label, need_text(estimate), candidate.slice_shape)
        self._over[key] = (candidate, memory, exact)
        if estimate.parameters_bytes > estimate.capacity_bytes:
            self._hopeless.add(key)

    def settle(self) -> None:
        """Word the reasons of the layouts memory rejected with the figure of their last choice, panels counted."""
        for key, (candidate, memory, exact) in self._over.items():
            if not exact:
                estimate, _ = layout_memory(self.setting, memory, candidate, exact=True)
                self._reasons[key] = RejectedMesh(candidate.label, need_text(estimate), candidate.slice_shape)


def need_text(estimate: MemoryEstimate) -> str:
    """``needs 33.04 GB per chip of 33.02 GB``: as many digits (up to 3) as tell the need from the capacity."""
    for digits in range(1, 4):
        need, capacity = f"{estimate.total_bytes / GB:.{digits}f}", f"{estimate.capacity_bytes / GB:.{digits}f}"
        if need != capacity:
            break
    return f"needs {need} GB per chip of {capacity} GB"


def admitted(setting: Setting, notes: list[str], names: MeshNames) -> Admission:
    """The candidates that fit in HBM, each under the first memory choice that fits it (``Admission``), every
    layout rejected and the candidates' panel limits. Refuses when no candidate is left."""
    admission = Admission(setting)
    for memory in memory_choices(setting):
        if not admission.admit(memory, notes):
            break
    admission.settle()
    if not admission.candidates:
        raise no_mesh(setting.request, setting.micro, admission.rejected)
    notes.extend(choice_notes(admission.choices, names))
    return admission


def choice_notes(choices: list[tuple[MemoryPlan, list[MeshCandidate]]], names: MeshNames) -> list[str]:
    """Where the first choices fitted no layout, and the layouts a later choice than the first to fit any let in."""
    passed = [memory for memory, fits in itertools.takewhile(lambda item: not item[1], choices)]
    admitting = [(memory, fits) for memory, fits in choices if fits]
    notes = []
    if passed and admitting:
        tried = ", ".join(f"recompute {m.recompute} with {microbatches_text(m.microbatches)}" for m in passed)
        chosen = admitting[0][0]
        notes.append(f"{tried}: no layout fits once its GeMM panels and replicas are counted; the next choice "
                     f"that fits is recompute {chosen.recompute} with {microbatches_text(chosen.microbatches)}")
    for memory, fits in admitting[1:]:
        named = [names.name(c) for c in fits]
        more = f" and {len(named) - NAMED_MESHES} more" if len(named) > NAMED_MESHES else ""
        notes.append(f"{', '.join(named[:NAMED_MESHES])}{more}: searched with recompute {memory.recompute} and "
                     f"{microbatches_text(memory.microbatches)}, the least that fits "
                     f"{'them' if len(named) > 1 else 'it'}")
    return notes


def layout_memory(setting: Setting, memory: MemoryPlan, candidate: MeshCandidate,
                  exact: bool = True) -> tuple[MemoryEstimate, PanelLimit]:
    """``capacity.mesh_memory`` of ``candidate`` under the search's request and ``memory``'s choice."""
    request = setting.request
    window = PrefetchWindow(request.prefetch_window, setting.budget)
    return mesh_memory(request.transformer, candidate.mesh, setting.micro_of(memory), memory.recompute,
                       request.profile, request.bytes_per_param, setting.budget, candidate.data, request.stage,
                       request.remat, algorithm=setting.algorithm, prefetch=setting.prefetch, window=window,
                       dtype=TUNED_DTYPE, attention=request.attention, microbatches=memory.microbatches,
                       ignore_memory=request.ignore_memory, exact=exact)


def memory_gate(setting: Setting, memory: MemoryPlan, candidates: list[MeshCandidate], notes: list[str],
                limits: Limits, admission: Admission) -> list[MeshCandidate]:
    """The meshes that fit in HBM under ``memory`` (all when memory is ignored), with GeMM panels no less than those
    of any plan the search builds from the layer options each mesh's limit admits (``capacity.mesh_memory``; the
    limits go into ``limits`` by mesh key): a mesh kept never overflows with the plan chosen, whose exact figure
    the whole step reports. The others go to ``admission.overflowed``. ``plan_memory`` has already refused a step
    that fits on no mesh even without panels, with the smallest shortfall and what would fit."""
    estimates = []
    for c in candidates:
        # a layout whose state and activations alone overflow needs no panels counted to be dropped
        estimate, limit = layout_memory(setting, memory, c, exact=False)
        limits[c.key] = limit
        estimates.append((estimate, c))
    if setting.request.ignore_memory:
        over = [e for e, _ in estimates if not e.feasible]
        if over:
            worst = max(over, key=lambda e: e.total_bytes)
            notes.append(f"memory ignored: configurations need up to {worst.total_bytes / GB:.1f} GB per chip "
                         f"of {worst.capacity_bytes / GB:.1f} GB")
        return candidates
    for estimate, c in estimates:
        if not estimate.feasible:
            admission.overflowed(c, memory, estimate, limits[c.key].counted)
    return [c for e, c in estimates if e.feasible]


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
