"""The autotuner: mesh shape, per-layer dataflow, transposition and slice count minimising the step time.

Default search:
1. Enumerate every feasible mesh R x C = P (``space``), and every layout D x R x C = P of D data-parallel replicas
   (D dividing the batch, the data axis on whole physical axes; only D = ``dp`` when given), on every legal slice
   shape of the chip count unless ``topology`` names one (``shapes``: 256 TPUv4 chips are 4x4x16 or 4x8x8; a
   candidate is a mesh on a shape), and drop those that do not fit in HBM (``capacity``) unless memory is ignored:
   where the request leaves recomputation or micro-batches open, each layout is admitted under the first choice that
   fits it (``gates.Admission``), and layouts under different choices are ranked and timed by their whole steps.
   The candidates of every shape are ranked, refined and timed together, as one search. A replica's GeMMs and
   non-FF ops are priced on its own R x C mesh with batch / D sequences; the data-parallel collectives add what no
   compute hides at the ends of the step (``data_tail``).
2. On every mesh, price every FF layer option with the algorithm's closed-form twins (by DES where a
   twin is missing) and the non-FF ops by theirs, and find the mesh's cheapest plans with the DP over
   layout flags (``dp``). Rank the meshes by that analytic step estimate.
   Where an axis is multi-hop the twins claim no closed form; the one-hop bound (``layer_costs``) ranks
   such meshes instead, optimistically, so that they are refined rather than dropped.
3. Refine the best ``refine_meshes`` meshes (and any within ``MESH_MARGIN`` of the best): price by DES the
   options of their best analytic plans (and of those tied with the best), every feasible K within a factor 2 of
   each chosen K, and the best K of any other dataflow within ``OPTION_MARGIN`` of the chosen one; rerun the DP on
   those prices.
   On meshes simulated at full fidelity (every chip; slow), the K window is left out.
4. Time the finalists as whole steps (``finalists``): the best plan of every mesh refined in step 3, the plans tied
   with it in priced ops (a few), and the second plan when a single mesh is left, each simulated with its
   data-parallel synchronisation instead of the closed-form tail; the fastest simulated step is the answer, so it is
   never slower than any configuration the search timed. A finalist whose bound (its ops, each GeMM's early
   transfers already arrived) reaches the fastest step is not timed (a note says so).
``exhaustive`` prices every option of every mesh by DES in step 2 and skips step 3, and step 4 times the plans of
every mesh by branch and bound on that bound: the whole-step optimum of the stated space.
Step times are layers x (non-FF ops + the FF layers' GeMMs): ops run one after another on each chip.

This module runs the stages in order; ``gates`` admits the layouts of step 1, ``ranking`` is step 2, ``refinement``
step 3, ``mesh_search`` holds one mesh's options, prices and plans throughout, and ``notes`` words the result's notes.
"""

from __future__ import annotations

from collections.abc import Callable

from tpusim.collectives.factory import network_for, place_mesh, takes_data_axis
from tpusim.config.options import WorkerOptions
from tpusim.engine.context import Context
from tpusim.errors import InfeasibleError
from tpusim.gemm.params import default_prefetch
from tpusim.model.memory import MemoryPlan, plan_memory
from tpusim.model.program import prefetch_budget
from tpusim.tuning.candidates import candidate_of, fastest_per_kind
from tpusim.tuning.finalists import (
    EXHAUSTIVE_STEPS,
    Finalist,
    Timed,
    choice,
    mesh_finalists,
    runner_up,
    time_exhaustively,
    time_finalists,
)
from tpusim.tuning.gates import admitted, no_mesh, simulable, unrefined
from tpusim.tuning.layer_costs import CostCache
from tpusim.tuning.mesh_search import MeshSearch
from tpusim.tuning.notes import MeshNames, memory_note, outcome_notes, pricing_notes
from tpusim.tuning.parallel import SimulationPool, simulation_pool
from tpusim.tuning.ranking import mesh_searches, rank_meshes
from tpusim.tuning.refinement import Refined, refine
from tpusim.tuning.result import Choice, MeshReport, TuneResult
from tpusim.tuning.shapes import searched_shapes
from tpusim.tuning.spec import Setting, TuneSpec
from tpusim.vocabulary import Fidelity, Recompute

__all__ = ["TuneSpec", "check_jobs", "tune"]


def check_jobs(jobs: object) -> None:
    """Refuse a ``jobs`` that is not an integer >= 1 (True is not one): ``WorkerOptions`` says how."""
    WorkerOptions.model_validate({"jobs": jobs})


def tune(request: TuneSpec, cache: CostCache | None = None, context: Context | None = None,
         progress: Callable[[str], None] | None = None, stages: Callable[[int, int], None] | None = None,
         jobs: int = 1) -> TuneResult:
    """Search the configuration space for ``request``; see the module docstring. ``progress`` hears a line as
    each stage of a long search begins, ``stages`` (stages done, stages in all) as each ends, from the end of the
    closed-form ranking on. ``jobs`` > 1 runs the simulations on that many worker processes (``parallel``); the
    result is the same."""
    check_jobs(jobs)
    cache = cache if cache is not None else CostCache(context)
    with simulation_pool(jobs, cache.context.cache_folder) as pool:
        return _search(request, cache, progress, stages, pool)


def _search(request: TuneSpec, cache: CostCache, progress: Callable[[str], None] | None,
            stages: Callable[[int, int], None] | None, pool: SimulationPool | None) -> TuneResult:
    say = progress if progress is not None else _silent
    count = stages if stages is not None else _uncounted
    notes: list[str] = []
    setting = _settle(request, cache.context)
    request, layers, names = setting.request, setting.request.transformer.layers, MeshNames(setting.shapes)
    admission = admitted(setting, notes, names)
    rejected = admission.rejected
    searches = simulable(mesh_searches(setting, admission, cache), rejected, notes)
    reports = {r.key: MeshReport(r.mesh, "skipped", r.reason, slice_shape=r.slice_shape) for r in rejected}

    say(f"pricing {len(searches)} mesh(es) by their closed forms" if not request.exhaustive
        else f"searching {len(searches)} mesh(es) exhaustively")
    refined = searches if request.exhaustive else rank_meshes(searches, reports, request.refine_meshes, layers)
    total = len(refined) + 2  # the ranking, each refined mesh, the whole steps
    count(1, total)
    final = refine(refined, pool, reports, layers, say, lambda number: count(1 + number, total), names.name,
                   bounds=request.exhaustive)
    if not final:
        raise no_mesh(request, setting.batch, unrefined(rejected, reports))

    timed, untimed = _whole_steps(request, pool, final, say, notes, names)
    for entry in reversed(timed):  # each mesh's report shows its fastest whole step
        reports[entry.finalist.key].simulated_step_s = entry.step_time_s
    best = choice(timed[0], layers)
    second = runner_up(timed)
    runner = choice(second, layers) if second is not None else None
    if not request.ignore_memory:  # the memory of the layout chosen (data-parallel replicas repeat model state)
        notes.insert(0, memory_note(setting, best, admission.memories[timed[0].finalist.key]))
    count(total, total)
    notes.extend(outcome_notes(setting, names, best, runner, final[0][2].candidate, untimed))
    notes.extend(pricing_notes(searches, request.exhaustive, names))
    return _result(setting, (best, runner), searches, timed, reports, notes)


def _settle(request: TuneSpec, context: Context) -> Setting:
    """What the search settles before it enumerates a mesh; what no layout can change fails here, once. The
    request's network model is on ``context``, the search's."""
    if request.fidelity is Fidelity.ANALYTIC:
        raise InfeasibleError("fidelity analytic is not offered for tune (it times whole steps)",
                              "use --fidelity auto, symmetric or full")
    hardware, model = request.profile, request.transformer
    algorithm = request.gemm_algorithm
    whole_batch = request.batch if request.batch is not None else request.chips
    # the search is one slice's: every slice runs the same layout on its share of the batch (docs/network.md#dcn)
    chips, batch = _one_slice(request, whole_batch)
    # a topology the network cannot take, or a chip count with no slice of the generation, fails here, once
    # (the request's model, over that placement: every candidate's model is derived from it with ``over``)
    network = network_for(hardware, place_mesh(hardware, chips, 1, topology=request.topology), context=context)
    prefetch = request.prefetch if request.prefetch is not None else default_prefetch(hardware)
    budget = prefetch_budget(prefetch, request.prefetch_budget)

    def fit(past: frozenset[tuple[Recompute, int]]) -> MemoryPlan:
        # the least memory a layout needs is that of the smallest data-parallel degree (replicas repeat model state)
        return plan_memory(model, chips, batch, request.recompute, request.microbatches,
                           hardware.chip.usable_hbm, request.bytes_per_param, ignore_memory=request.ignore_memory,
                           reserved_bytes=budget, data_parallel=request.dp or 1, zero_stage=request.stage,
                           remat_save=request.remat[0], remat_offload=request.remat[1],
                           attention=request.attention, combine_bytes=hardware.combine_threshold, past=past)

    memory = fit(frozenset())
    open_choice = request.recompute is Recompute.AUTO or request.microbatches is None
    # the calibrated profiles' fitted costs describe one 2D mesh: they take no data axis
    if not takes_data_axis(hardware) and (request.dp or 1) > 1:
        raise InfeasibleError(f"--dp {request.dp}: data parallelism does not apply to calibrated profile "
                              f"{hardware.name!r}, whose fitted costs describe one 2D mesh; use a physical profile "
                              "such as 'tpuv4', or --dp 1")
    dp = request.dp if request.dp is not None or takes_data_axis(hardware) else 1
    return Setting(request, algorithm, whole_batch, chips, batch, prefetch, budget, memory, open_choice, fit, dp,
                   searched_shapes(request.topology, hardware, chips), network)


def _one_slice(request: TuneSpec, batch: int) -> tuple[int, int]:
    """(chips, batch) of one of the request's slices over DCN; the slices must divide both."""
    slices = request.dcn_slices
    if request.chips % slices or batch % slices:
        raise InfeasibleError(f"{slices} slices over DCN do not divide the {request.chips} chips and the batch of "
                              f"{batch} sequences", f"choose chips and a batch that are multiples of {slices}")
    if slices > 1 and request.profile.slice_network is None:
        raise InfeasibleError(f"dcn_data {slices} joins slices over DCN, which profile {request.profile.name!r} "
                              "does not describe (no dcn block)", "use a physical profile such as 'tpuv4'")
    return request.chips // slices, batch // slices


def _silent(line: str) -> None:
    del line


def _uncounted(done: int, total: int) -> None:
    del done, total


def _whole_steps(request: TuneSpec, pool: SimulationPool | None, final: list[Refined],
                 say: Callable[[str], None], notes: list[str], names: MeshNames) -> tuple[list[Timed], list[Finalist]]:
    """Time the finalists as whole steps (``finalists``): the timed ones, fastest first, and those left untimed."""
    layers = request.transformer.layers
    if request.exhaustive:
        say("timing every plan that can still win as a whole step")
        timed, capped = time_exhaustively([search for _, _, search, _ in final], layers)
        if capped:
            notes.append(f"exhaustive: {', '.join(names.name(c) for c in capped)} had more than {EXHAUSTIVE_STEPS} "
                         "plans whose ops could still beat the best step; the rest were not timed, so the answer is "
                         "the optimum of the plans timed")
        return timed, []
    # every mesh the search simulated is a finalist with its best plan and those tied with it; a single mesh adds
    # its second plan
    finalists = [f for _, _, search, plans in final for f in mesh_finalists(search, plans, len(final) == 1)]
    say(f"timing the best configuration{' and the runner-up' if len(finalists) > 1 else ''} as whole steps")
    timed, untimed = time_finalists(pool, finalists, layers)
    # a mesh one of whose plans was timed is not "left untimed"; another is named once, by its cheapest plan
    named: dict[tuple[str, str], Finalist] = {}
    for left in untimed:  # in increasing order of their bound
        named.setdefault(left.key, left)
    return timed, [f for key, f in named.items() if key not in {t.finalist.key for t in timed}]


def _result(setting: Setting, chosen: tuple[Choice, Choice | None], searches: list[MeshSearch], timed: list[Timed],
            reports: dict[tuple[str, str], MeshReport], notes: list[str]) -> TuneResult:
    request, layers, best = setting.request, setting.request.transformer.layers, chosen[0]
    return TuneResult(
        model=request.transformer.name, hardware=request.profile.name, algorithm=setting.algorithm.name,
        chips=request.chips, batch=setting.whole_batch, microbatches=best.microbatches,
        prefetch=str(setting.prefetch), recompute=best.recompute, attention=str(request.attention),
        fidelity=str(request.fidelity), zero_stage=request.stage, dcn_data=request.dcn_slices,
        exhaustive=request.exhaustive, best=best, runner_up=chosen[1],
        evaluated=sum(len(set(s.twin_prices) | set(s.des_prices)) for s in searches),
        simulated=sum(len(s.des_prices) for s in searches), steps_simulated=len(timed),
        search_space=sum(s.space_size() for s in searches),
        meshes=sorted(reports.values(), key=lambda r: (tuple(int(v) for v in r.mesh.split("x")), r.slice_shape or "")),
        ignore_memory=request.ignore_memory, notes=notes,
        candidates=fastest_per_kind(candidate_of(choice(t, layers), request.stage) for t in timed),
    )
