"""The ranking of meshes (default search, step 2): one search per admitted candidate, priced by its closed forms,
and the leaders chosen for the DES refinement with the window of options each may use."""

from __future__ import annotations

from dataclasses import replace

from tpusim.gemm.params import GemmParams
from tpusim.model.feasibility import parts_for
from tpusim.model.layer import ff_layers
from tpusim.model.memory import MemoryPlan
from tpusim.model.plan import derived_spec
from tpusim.model.step import StepSpec
from tpusim.tuning.data_tail import data_parallel_tail
from tpusim.tuning.dp import tied
from tpusim.tuning.gates import Admission
from tpusim.tuning.layer_costs import CostCache, PricingContext, pass_multiplicity
from tpusim.tuning.mesh_search import MeshSearch, mesh_report
from tpusim.tuning.result import MeshReport
from tpusim.tuning.space import MeshCandidate
from tpusim.tuning.spec import TUNED_DTYPE, Setting
from tpusim.vocabulary import Recompute

MESH_MARGIN = 0.02  # meshes whose analytic estimate is this close to the best are refined too
SEED_PLANS = 4  # analytic plans per mesh whose options seed the refinement
TIED_SEEDS = 16  # analytic plans tied with a mesh's best that seed it too (``finalists.TIED_PLANS``)


def replica_spec(setting: Setting, batch: int, memory: MemoryPlan) -> StepSpec:
    """The step of a replica training ``batch`` sequences under the settled request and ``memory``'s recomputation."""
    request = setting.request
    save, offload = request.remat
    # what a tune request searches (its dataflows, micro-batch counts) is no step's: the replica's are set here
    return derived_spec(request, model=request.transformer, algorithm=setting.algorithm, batch=batch,
                        dataflows=None, prefetch=setting.prefetch, recompute=memory.recompute,
                        microbatches=1, prefetch_budget=setting.budget, remat_save=save, remat_offload=offload,
                        dtype=TUNED_DTYPE, zero_stage=request.stage)


def whole_spec(setting: Setting, memory: MemoryPlan) -> StepSpec:
    """The whole step every slice's layouts searched under ``memory`` are timed as."""
    return replace(replica_spec(setting, setting.whole_batch, memory), microbatches=memory.microbatches,
                   dcn_slices=setting.request.dcn_slices)


def mesh_searches(setting: Setting, admission: Admission, cache: CostCache) -> list[MeshSearch]:
    """One search per admitted candidate, under its memory choice, each charged its data-parallel tail
    (``data_tail``)."""
    request, algorithm, memories = setting.request, setting.algorithm, admission.memories
    flips = algorithm.parallelism == "2d"
    searches = []
    groups: dict[tuple[int, Recompute, int], list[MeshCandidate]] = {}
    for candidate in admission.candidates:
        memory = memories[candidate.key]
        groups.setdefault((candidate.data, memory.recompute, memory.microbatches), []).append(candidate)
    for (data, _, _), among in sorted(groups.items(), key=lambda item: item[0][0]):
        memory = memories[among[0].key]
        # one replica's share of the micro-batch: its GeMM shapes, pass counts and non-FF ops
        spec = replica_spec(setting, setting.micro_of(memory) // data, memory)
        whole = whole_spec(setting, memory)
        pricing = PricingContext(setting.network, algorithm, GemmParams(setting.prefetch), TUNED_DTYPE,
                                 request.fidelity, pass_multiplicity(spec, among[0].mesh))
        for candidate in among:
            # the QKV GeMM's width depends on the feature split where K / V heads are replicated
            layers = ff_layers(request.transformer, spec.tokens,
                               feature_parts=parts_for(candidate.mesh, algorithm.parallelism)[1])
            search = MeshSearch(candidate, layers, pricing, cache, spec, whole, flips, request.dataflows,
                                admission.limits[candidate.key])
            search.tail = data_parallel_tail(candidate, setting.network, request.transformer, request.stage,
                                             request.dcn_slices)
            searches.append(search)
    return searches


def rank_meshes(searches: list[MeshSearch], reports: dict[tuple[str, str], MeshReport], refine_meshes: int,
                layers: int) -> list[MeshSearch]:
    """Rank the meshes by their analytic best and seed the refinement of the leaders (default search)."""
    ranked = []
    for search in searches:
        found = search.plans(simulated=False, keep=TIED_SEEDS)
        plans = found[:SEED_PLANS] + tied(found[SEED_PLANS:], found[0]) if found else []
        if plans:
            ranked.append((search.ranking_cost(plans[0], layers), search.candidate.key, search, plans))
        reports[search.candidate.key] = mesh_report(search, plans, simulated=False, layers=layers)
    ranked.sort(key=lambda item: item[:2])
    refined = []
    for rank, (cost, _, search, plans) in enumerate(ranked):
        if rank < refine_meshes or cost <= ranked[0][0] * (1 + MESH_MARGIN):
            search.seed_window(plans)
            refined.append(search)
    return refined
