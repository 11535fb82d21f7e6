"""The notes a tune result carries about its answer: the memory of the layout chosen, the slice shapes searched,
the finalists left untimed, where the whole steps disagree with the search's estimates, and how the meshes were
priced. Where a search spans several slice shapes, a mesh is named on its shape."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tpusim.model.memory import MemoryPlan, microbatches_text
from tpusim.tuning.finalists import Finalist, ops_bound
from tpusim.tuning.mesh_search import MeshSearch
from tpusim.tuning.result import Choice
from tpusim.tuning.shapes import slice_note
from tpusim.tuning.space import MeshCandidate, shown
from tpusim.tuning.spec import Setting
from tpusim.units import GB

NAMED_MESHES = 12  # a note names at most this many meshes (a pod's search ranks hundreds)


@dataclass(frozen=True)
class MeshNames:
    """How the notes and progress lines name a mesh."""

    shapes: list[str | None]  # the slice shapes searched

    def named(self, mesh: str, shape: str | None) -> str:
        """A mesh as the notes name it: on its slice shape where the search spans several."""
        return shown(mesh, shape if len(self.shapes) > 1 else None)

    def name(self, candidate: MeshCandidate) -> str:
        return self.named(candidate.label, candidate.slice_shape)


def memory_note(setting: Setting, best: Choice, memory: MemoryPlan) -> str:
    """The memory of the layout chosen (``memory``: the choice it was searched under; data-parallel replicas repeat
    model state)."""
    return (f"memory: recompute {memory.recompute}, {microbatches_text(memory.microbatches)} of "
            f"{setting.micro_of(memory)} sequences, {best.memory_bytes_per_chip / GB:.1f} GB per chip of "
            f"{memory.estimate.capacity_bytes / GB:.1f} GB")


def outcome_notes(setting: Setting, names: MeshNames, best: Choice, runner: Choice | None, leader: MeshCandidate,
                  untimed: Sequence[Finalist]) -> list[str]:
    """The slice shapes searched, the finalists left untimed, and where the whole steps depart from the estimates
    (``leader`` is the estimates' best mesh)."""
    request, layers = setting.request, setting.request.transformer.layers
    notes = [slice_note(request.topology, request.profile, setting.shapes, best.slice_shape, setting.chips)]
    for left in untimed:
        notes.append(f"{names.name(left.search.candidate)} not timed as a whole step: its ops alone take "
                     f"{ops_bound(left.plan, left.search, layers):.4g} s even with every early transfer hidden, no "
                     f"less than the best's simulated {best.step_time_s:.4g} s")
    if (best.slice_shape, best.mesh) != (leader.slice_shape, leader.label):
        notes.append(f"the whole steps reorder the search's estimates: {names.named(best.mesh, best.slice_shape)} "
                     f"simulated fastest, ahead of the estimates' leader {names.name(leader)}")
    for item in (best, runner):
        if item is not None and abs(item.step_time_s - item.estimate_step_s) > 0.005 * item.step_time_s:
            notes.append(f"{names.named(item.mesh, item.slice_shape)}: the simulated step differs from the search's "
                         "estimate (its priced ops and data-parallel tail) by "
                         f"{item.step_time_s / item.estimate_step_s - 1:+.2%}")
    return notes


def pricing_notes(searches: list[MeshSearch], exhaustive: bool, names: MeshNames) -> list[str]:
    """The meshes ranked by the one-hop bound, and the options ranked by DES for want of a closed form."""
    notes = []
    bounded = [names.name(s.candidate) for s in searches if s.bounded]
    if bounded and not exhaustive:
        more = f" and {len(bounded) - NAMED_MESHES} more" if len(bounded) > NAMED_MESHES else ""
        notes.append(f"meshes ranked by the one-hop bound (multi-hop axes have no closed form): "
                     f"{', '.join(bounded[:NAMED_MESHES])}{more}")
    fallbacks = sum(s.twin_fallbacks for s in searches)
    if fallbacks:
        notes.append(f"{fallbacks} layer options had no closed form and were ranked by their DES price")
    return notes
