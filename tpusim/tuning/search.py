"""The autotuner: mesh shape, per-layer dataflow, transposition and slice count minimising the step time.

Default search:
1. Enumerate every feasible mesh R x C = P (``space``), and every layout D x R x C = P of D data-parallel replicas
   (D dividing the batch, the data axis on whole physical axes; only D = ``dp`` when given), on every legal slice
   shape of the chip count unless ``topology`` names one (``shapes``: 256 TPUv4 chips are 4x4x16 or 4x8x8; a
   candidate is a mesh on a shape), and drop those that do not fit in HBM (``capacity``) unless memory is ignored.
   The candidates of every shape are ranked, refined and timed together, as one search. A replica's GeMMs and
   non-FF ops are priced on its own R x C mesh with batch / D sequences; the data-parallel collectives add what no
   compute hides at the ends of the step (``data_tail``).
2. On every mesh, price every FF layer option with the algorithm's closed-form twins (by DES where a
   twin is missing) and the non-FF ops by theirs, and find the mesh's cheapest plans with the DP over
   layout flags (``dp``). Rank the meshes by that analytic step estimate.
   Where an axis is multi-hop the twins claim no closed form; the one-hop bound (``layer_costs``) ranks
   such meshes instead, optimistically, so that they are refined rather than dropped.
3. Refine the best ``refine_meshes`` meshes (and any within ``MESH_MARGIN`` of the best): price by DES the
   options of their best analytic plans, every feasible K within a factor 2 of each chosen K, and the
   best K of any other dataflow within ``OPTION_MARGIN`` of the chosen one; rerun the DP on those prices.
   On meshes simulated at full fidelity (every chip; slow), the K window is left out.
4. Time the finalists as whole steps (``finalists``): the best plan of every mesh refined in step 3 (and the
   second plan when a single mesh is left), each simulated with its data-parallel synchronisation instead of the
   closed-form tail; the fastest simulated step is the answer, so it is never slower than any configuration the
   search timed. A finalist whose ops alone already take longer than the fastest step is not timed (a note says so).
``exhaustive`` prices every option of every mesh by DES in step 2 and skips step 3, and step 4 times the plans of
every mesh by branch and bound on that ops bound: the whole-step optimum of the stated space.
Step times are layers x (non-FF ops + the FF layers' GeMMs): ops run one after another on each chip.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tpusim.collectives.factory import network_for, place_mesh, takes_data_axis
from tpusim.config import HardwareProfile, TransformerModel
from tpusim.engine.context import Context
from tpusim.errors import InfeasibleError, UserError
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.fidelity import resolve_fidelity, symmetric_obstacle
from tpusim.gemm.params import GemmParams, default_prefetch
from tpusim.gemm.registry import get_algorithm
from tpusim.model.feasibility import parts_for
from tpusim.model.layer import FF_LAYERS, FFLayer, ff_layers, kv_heads_on_mesh
from tpusim.model.memory import microbatches_text, plan_memory
from tpusim.model.program import PrefetchWindow, prefetch_budget
from tpusim.model.step import StepSpec
from tpusim.tuning.candidates import candidate_of, fastest_per_kind
from tpusim.tuning.capacity import PanelLimit, host_shortfall, mesh_memory, option_panels
from tpusim.tuning.data_tail import data_parallel_tail
from tpusim.tuning.dp import STAGES, Plan, best_plans, count_plans, output_flag
from tpusim.tuning.finalists import (
    EXHAUSTIVE_STEPS,
    Finalist,
    choice,
    ops_bound,
    runner_up,
    time_exhaustively,
    time_finalists,
)
from tpusim.tuning.layer_costs import (
    CostCache,
    LayerPricer,
    PricingContext,
    non_ff_time,
    non_ff_twin,
    pass_multiplicity,
)
from tpusim.tuning.parallel import Entries, PendingTimes, SimulationPool, simulation_pool
from tpusim.tuning.result import MeshReport, TuneResult
from tpusim.tuning.shapes import searched_shapes, slice_note
from tpusim.tuning.space import (
    LayerOption,
    MeshCandidate,
    RejectedMesh,
    data_degrees,
    layer_options,
    mesh_candidates,
    shown,
)
from tpusim.units import GB
from tpusim.vocabulary import Activation, Attention, Dataflow, Fidelity, Prefetch, Recompute

REFINE_MESHES = 3
MESH_MARGIN = 0.02  # meshes whose analytic estimate is this close to the best are refined too
OPTION_MARGIN = 0.05  # another dataflow this close to a chosen option's twin is simulated too
SEED_PLANS = 4  # analytic plans per mesh whose options seed the refinement
NAMED_MESHES = 12  # a note names at most this many meshes (a pod's search ranks hundreds)


@dataclass(frozen=True)
class TuneSpec:
    """What to tune for; ``batch`` defaults to the chip count, ``prefetch`` to the profile's default."""

    model: TransformerModel
    hardware: HardwareProfile
    chips: int
    algorithm: str = "meshslice"
    batch: int | None = None
    topology: str | None = None
    prefetch: Prefetch | None = None
    recompute: Recompute = Recompute.AUTO
    remat_save: frozenset[Activation] = frozenset()  # under recompute custom (model.remat)
    remat_offload: frozenset[Activation] = frozenset()
    attention: Attention = Attention.UNFUSED
    prefetch_window: int = 1
    prefetch_budget: int | str | None = None
    microbatches: int | None = None  # None: 1, or the fewest that fit (``model.memory.plan_memory``)
    fidelity: Fidelity = Fidelity.AUTO
    exhaustive: bool = False
    ignore_memory: bool = False
    allow_infeasible: bool = False
    refine_meshes: int = REFINE_MESHES
    dataflows: tuple[Dataflow, ...] = tuple(Dataflow)  # the per-layer dataflows to choose from
    dtype: str = "bf16"
    bytes_per_param: float = 16.0
    dp: int | None = None  # the data-parallel degree D; None: every D the chips, batch and topology allow
    zero_stage: int = 1  # how layouts with D > 1 shard the model state (model.data_parallel)
    dcn_slices: int = 1  # slices over DCN (a dcn_data axis): ``chips`` and ``batch`` are those of every slice


class _MeshSearch:
    """The options, prices and plans of one candidate mesh."""

    def __init__(self, candidate: MeshCandidate, layers: tuple[FFLayer, ...], context: PricingContext,
                 cache: CostCache, spec: StepSpec, flips: bool, dataflows: tuple[Dataflow, ...],
                 limit: PanelLimit) -> None:
        self.candidate = candidate
        self.limit = limit  # the GeMM panels an option may hold (``capacity.mesh_memory``)
        self.dataflows = dataflows
        self.layers = layers
        self.context = context
        self.pricer = LayerPricer(context, candidate.mapping.tensor_mapping, cache)
        self.tail = 0.0  # seconds per step of data-parallel synchronisation the ranking charges (``data_tail``)
        self.spec = spec
        self.flips = flips
        self.twin_prices: dict[tuple[int, LayerOption], float] = {}
        self.des_prices: dict[tuple[int, LayerOption], float] = {}
        self.window: set[tuple[int, LayerOption]] | None = None  # what the DES-priced DP may use
        self.bounded = 0  # options ranked by the one-hop bound
        self.twin_fallbacks = 0  # options ranked by DES for want of any closed form
        self.simulations: Entries = []  # what worker processes simulated for this mesh (``tune --jobs``)
        obstacle = symmetric_obstacle(context.algorithm, context.base,
                                      network_for(context.hardware, candidate.mapping.tensor_mapping))
        self.full = resolve_fidelity(context.fidelity, obstacle)[0] is Fidelity.FULL
        self._options: dict[tuple[int, bool], list[LayerOption]] = {}

    @property
    def step_context(self) -> Context:
        """Where whole steps on this mesh are simulated: the search's context, holding its GeMM timings."""
        return self.pricer.cache.context

    @property
    def starts(self) -> tuple[bool, ...]:
        """Allowed block-input layouts: the standard one only.

        The embedding hands the first block tokens over axis 0, and the step model sizes the LayerNorm
        statistics and splits the heads for that layout. A block run transposed throughout would be the
        mesh C x R with its axes swapped, which the enumeration covers as a mesh of its own.
        """
        return (False,)

    def attention_ok(self, flag: bool) -> bool:
        """The transposed layout splits the heads over axis 0; the QKV GeMM was sized for the K / V heads
        replicated over axis 1, so a mesh whose two axes replicate them differently keeps the standard layout."""
        model, (rows, cols) = self.spec.model, self.candidate.mesh
        same_kv = kv_heads_on_mesh(model, rows) == kv_heads_on_mesh(model, cols)
        return not flag or (self.candidate.transposed_ok and same_kv)

    def options(self, index: int, flag: bool, required: bool | None) -> list[LayerOption]:
        key = (index, flag)
        if key not in self._options:
            ctx = self.context
            layer, mesh = self.layers[index], self.candidate.mesh
            found = layer_options(layer, ctx.algorithm, mesh, flag, self.dataflows, ctx.base,
                                  ctx.dtype) if self.flips or not flag else []
            # an option whose panels overflow what the rest of the working set leaves is no plan at all
            self._options[key] = [o for o in found if self.limit.admits(
                option_panels(ctx.algorithm, layer, o, mesh, ctx.base, ctx.dtype)[0])]
        found = self._options[key]
        if required is None:
            return found
        # a layer that closes a residual must hand on ``required``; pricing dead ends would be wasted work
        return [o for o in found if output_flag(flag, o, self.flips) == required]

    def by_twin(self, index: int, flag: bool, required: bool | None) -> list[tuple[LayerOption, float]]:
        priced = []
        for option in self.options(index, flag, required):
            key = (index, option)
            if key not in self.twin_prices:
                value = self.pricer.analytic(self.layers[index], option)
                if value is None:
                    value = self.pricer.bound(self.layers[index], option)
                    self.bounded += value is not None
                if value is None:
                    self.twin_fallbacks += 1
                    value = self._simulate(index, option)
                self.twin_prices[key] = value
            priced.append((option, self.twin_prices[key]))
        return priced

    def windowed(self, index: int, flag: bool, required: bool | None) -> list[LayerOption]:
        """``options`` the DES-priced DP may use (all of them until ``seed_window``)."""
        return [o for o in self.options(index, flag, required) if self.window is None or (index, o) in self.window]

    def by_simulation(self, index: int, flag: bool, required: bool | None) -> list[tuple[LayerOption, float]]:
        return [(o, self._simulate(index, o)) for o in self.windowed(index, flag, required)]

    def _simulate(self, index: int, option: LayerOption) -> float:
        key = (index, option)
        if key not in self.des_prices:
            self.des_prices[key] = self.pricer.simulated(self.layers[index], option)
        return self.des_prices[key]

    def non_ff(self, simulated: bool) -> dict[bool, float]:
        """Per allowed start layout, one layer's non-FF time (twin for ranking, DES for the final DP)."""
        times = {}
        for start in self.starts:
            spec = replace(self.spec, transposes=(start,) * len(FF_LAYERS))
            hardware, mapping = self.context.hardware, self.candidate.mapping.tensor_mapping
            twin = None
            if not simulated:
                twin = non_ff_twin(spec, hardware, mapping)
                twin = twin if twin is not None else non_ff_twin(spec, hardware, self.pricer.relaxed)
            times[start] = twin if twin is not None else non_ff_time(spec, hardware, mapping, self.context.fidelity,
                                                                         self.pricer.cache.context)
        return times

    def ranking_cost(self, plan: Plan, layers: int) -> float:
        """What meshes are ranked by: ``plan``'s per-layer cost with the data-parallel tail spread over ``layers``."""
        return plan.cost + self.tail / layers

    def plans(self, simulated: bool, keep: int) -> list[Plan]:
        priced = self.by_simulation if simulated else self.by_twin
        return best_plans(priced, self.non_ff(simulated), flips=self.flips, attention_ok=self.attention_ok,
                          keep=keep)

    def unsimulated(self) -> list[tuple[tuple[Any, ...], GemmProblem, GemmParams]]:
        """The GeMMs ``plans(simulated=True)`` will simulate, found by a dry run of the DP: which options it asks
        for depends on the options alone, never on their prices. (cache key, problem, parameters) each, once."""
        asked: dict[tuple[int, LayerOption], None] = {}

        def record(index: int, flag: bool, required: bool | None) -> list[tuple[LayerOption, float]]:
            found = [(o, 0.0) for o in self.windowed(index, flag, required)]
            asked.update(((index, o), None) for o, _ in found)
            return found

        best_plans(record, dict.fromkeys(self.starts, 0.0), flips=self.flips, attention_ok=self.attention_ok,
                   keep=1)
        gemms = {}
        for index, option in asked:
            if (index, option) not in self.des_prices:
                gemms.update({key: (key, problem, params) for key, problem, params
                              in self.pricer.unsimulated(self.layers[index], option)})
        return list(gemms.values())

    def space_size(self) -> int:
        return count_plans(self.options, self.starts, flips=self.flips, attention_ok=self.attention_ok)

    def seed_window(self, plans: Sequence[Plan]) -> None:
        """The options the DES refinement may use, grown around the best analytic plans."""
        window: set[tuple[int, LayerOption]] = set()
        for plan in plans:
            for index, chosen in enumerate(plan.options):
                required = plan.start if STAGES[index].closes_residual else None
                available = self.by_twin(index, chosen.transpose, required)
                best = {o: t for o, t in available}[chosen]
                seeds = [chosen]
                hands_on = output_flag(chosen.transpose, chosen, self.flips)
                for dataflow in self.dataflows:
                    # a rival must hand on the same layout, or the rest of the plan would not fit it
                    rivals = [(t, o.describe(), o) for o, t in available
                              if o.dataflow is dataflow and output_flag(o.transpose, o, self.flips) == hands_on]
                    if dataflow is not chosen.dataflow and rivals:
                        cost, _, rival = min(rivals)
                        if cost <= best * (1 + OPTION_MARGIN):
                            seeds.append(rival)
                for seed in seeds:
                    window.update((index, o) for o, _ in available if o.dataflow is seed.dataflow
                                  and (o == seed or (not self.full and _near(o.slices, seed.slices))))
        self.window = window


def _near(k: int | None, around: int | None) -> bool:
    """Whether slice count k is within a factor 2 of ``around`` (both unset counts as near)."""
    if k is None or around is None:
        return k is None and around is None
    return around <= 2 * k and k <= 2 * around


def check_jobs(jobs: object) -> None:
    """Refuse a ``jobs`` that is not an integer >= 1 (True is not one)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise UserError(f"jobs {jobs!r} must be an integer >= 1")


def tune(request: TuneSpec, cache: CostCache | None = None, context: Context | None = None,
         progress: Callable[[str], None] | None = None, stages: Callable[[int, int], None] | None = None,
         jobs: int = 1) -> TuneResult:
    """Search the configuration space for ``request``; see the module docstring. ``progress`` hears a line as
    each stage of a long search begins, ``stages`` (stages done, stages in all) as each ends, from the end of the
    closed-form ranking on. ``jobs`` > 1 runs the simulations on that many worker processes (``parallel``); the
    result is the same."""
    check_jobs(jobs)
    cache = cache if cache is not None else CostCache(context)
    past: set[tuple[Recompute, int]] = set()
    first: InfeasibleError | None = None
    with simulation_pool(jobs, cache.context.cache_folder) as pool:
        while True:
            try:
                return _search(request, cache, progress, stages, pool, frozenset(past))
            except _Overflowed as overflowed:
                first = first or overflowed.error
                past.add(overflowed.choice)
            except InfeasibleError:
                if first is None:
                    raise
                raise first from None  # no other choice fits: say why the first one did not


class _Overflowed(Exception):
    """Every layout overflowed HBM under an open recomputation and micro-batch ``choice`` once its own needs (its
    GeMM panels, its replicas' state) were counted: the next choice that fits is searched instead."""

    def __init__(self, error: InfeasibleError, choice: tuple[Recompute, int]) -> None:
        super().__init__(str(error))
        self.error = error
        self.choice = choice


def _search(request: TuneSpec, cache: CostCache, progress: Callable[[str], None] | None,
            stages: Callable[[int, int], None] | None, pool: SimulationPool | None,
            past: frozenset[tuple[Recompute, int]] = frozenset()) -> TuneResult:
    say = progress if progress is not None else _silent
    count = stages if stages is not None else _uncounted
    if request.fidelity is Fidelity.ANALYTIC:
        raise InfeasibleError("fidelity analytic is not offered for tune (it times whole steps)",
                              "use --fidelity auto, symmetric or full")
    hardware, model, slices = request.hardware, request.model, request.dcn_slices
    algorithm = get_algorithm(request.algorithm)
    whole_batch = request.batch if request.batch is not None else request.chips
    # the search is one slice's: every slice runs the same layout on its share of the batch (docs/network.md#dcn)
    chips, batch = _one_slice(request, whole_batch)
    # a topology the network cannot take, or a chip count with no slice of the generation, fails here, once
    place_mesh(hardware, chips, 1, topology=request.topology)
    prefetch = request.prefetch if request.prefetch is not None else default_prefetch(hardware)
    notes: list[str] = []
    budget = prefetch_budget(prefetch, request.prefetch_budget)
    # the least memory a layout needs is that of the smallest data-parallel degree (replicas repeat model state)
    memory = plan_memory(model, chips, batch, request.recompute, request.microbatches,
                         hardware.chip.usable_hbm, request.bytes_per_param, ignore_memory=request.ignore_memory,
                         reserved_bytes=budget, data_parallel=request.dp or 1, zero_stage=request.zero_stage,
                         remat_save=request.remat_save, remat_offload=request.remat_offload,
                         attention=request.attention, combine_bytes=hardware.combine_threshold, past=past)
    open_choice = request.recompute is Recompute.AUTO or request.microbatches is None
    if past:
        tried = ", ".join(f"recompute {level} with {microbatches_text(m)}" for level, m in sorted(past))
        notes.append(f"{tried}: no layout fits once its GeMM panels and replicas are counted; the next choice "
                     f"that fits is recompute {memory.recompute} with {microbatches_text(memory.microbatches)}")
    request = replace(request, recompute=memory.recompute, microbatches=memory.microbatches)
    micro = batch // memory.microbatches  # the search prices one micro-batch; whole steps are timed at m of them

    candidates: list[MeshCandidate] = []
    rejected: list[RejectedMesh] = []
    # the calibrated profiles' fitted costs describe one 2D mesh: they take no data axis
    if not takes_data_axis(hardware) and (request.dp or 1) > 1:
        raise InfeasibleError(f"--dp {request.dp}: data parallelism does not apply to calibrated profile "
                              f"{hardware.name!r}, whose fitted costs describe one 2D mesh; use a physical profile "
                              "such as 'tpuv4', or --dp 1")
    dp = request.dp if request.dp is not None or takes_data_axis(hardware) else 1
    shapes = searched_shapes(request.topology, hardware, chips)

    def named(mesh: str, shape: str | None) -> str:
        """A mesh as the notes name it: on its slice shape where the search spans several."""
        return shown(mesh, shape if len(shapes) > 1 else None)

    def name(candidate: MeshCandidate) -> str:
        return named(candidate.label, candidate.slice_shape)

    for shape in shapes:
        for data in data_degrees(chips, micro, dp):
            found, skipped = mesh_candidates(model, algorithm, chips, micro, hardware, shape,
                                             request.allow_infeasible, data)
            candidates += found
            rejected += skipped
    limits: dict[tuple[str, str], PanelLimit] = {}
    kept = len(candidates)
    candidates, rejected = _memory_gate(request, micro, candidates, rejected, notes, budget, prefetch, limits)
    if not candidates:
        if open_choice and kept and not request.ignore_memory:  # the gate dropped them: more recomputation may fit
            raise _Overflowed(_no_mesh(request, micro, rejected), (memory.recompute, memory.microbatches))
        raise _no_mesh(request, micro, rejected)

    flips = algorithm.parallelism == "2d"
    searches = []
    for data in sorted({c.data for c in candidates}):
        # one replica's share of the micro-batch: its GeMM shapes, pass counts and non-FF ops
        spec = StepSpec(model, algorithm.name, micro // data, prefetch=prefetch, recompute=memory.recompute,
                        attention=request.attention, prefetch_window=request.prefetch_window,
                        prefetch_budget=budget, bytes_per_param=request.bytes_per_param, dtype=request.dtype,
                        allow_infeasible=request.allow_infeasible, fidelity=request.fidelity,
                        zero_stage=request.zero_stage, remat_save=request.remat_save,
                        remat_offload=request.remat_offload)
        among = [c for c in candidates if c.data == data]
        pricing = PricingContext(hardware, algorithm, GemmParams(prefetch), request.dtype, request.fidelity,
                                 pass_multiplicity(spec, among[0].mesh))
        for candidate in among:
            # the QKV GeMM's width depends on the feature split where K / V heads are replicated
            layers = ff_layers(model, spec.tokens, feature_parts=parts_for(candidate.mesh, algorithm.parallelism)[1])
            search = _MeshSearch(candidate, layers, pricing, cache, spec, flips, request.dataflows,
                                 limits[candidate.key])
            search.tail = data_parallel_tail(candidate, hardware, model, request.zero_stage, slices)
            searches.append(search)
    searches = _simulable(searches, rejected, notes)
    reports = {r.key: MeshReport(r.mesh, "skipped", r.reason, slice_shape=r.slice_shape) for r in rejected}

    say(f"pricing {len(searches)} mesh(es) by their closed forms" if not request.exhaustive
        else f"searching {len(searches)} mesh(es) exhaustively")
    refined = searches if request.exhaustive else _rank(searches, reports, request.refine_meshes, model.layers)
    total = len(refined) + 2  # the ranking, each refined mesh, the whole steps
    count(1, total)
    # every refined mesh's GeMMs go to the workers at once, one task per worker (``parallel``)
    submitted = _submit(pool, refined) if pool is not None else None
    final = []
    for number, search in enumerate(refined, start=1):
        say(f"simulating the best candidates of mesh {name(search.candidate)} ({number} of {len(refined)})")
        if submitted is not None and number == 1:
            _collect(refined, submitted)
        plans = search.plans(simulated=True, keep=2)
        if plans:
            final.append((search.ranking_cost(plans[0], model.layers), search.candidate.key, search, plans))
        report = _report(search, plans, simulated=True, layers=model.layers)
        previous = reports.get(search.candidate.key)
        report.analytic_step_s = previous.analytic_step_s if previous is not None else None
        reports[search.candidate.key] = report
        count(1 + number, total)
    if not final:
        known = {r.key for r in rejected}
        raise _no_mesh(request, batch, [*rejected, *(RejectedMesh(r.mesh, r.reason or "", r.slice_shape)
                                                     for key, r in reports.items() if key not in known)])
    final.sort(key=lambda item: item[:2])

    whole = replace(spec, batch=whole_batch, microbatches=memory.microbatches, dcn_slices=slices)
    if request.exhaustive:
        say("timing every plan that can still win as a whole step")
        timed, capped = time_exhaustively([search for _, _, search, _ in final], whole, model.layers)
        untimed: list[Finalist] = []
        if capped:
            notes.append(f"exhaustive: {', '.join(name(c) for c in capped)} had more than {EXHAUSTIVE_STEPS} plans "
                         "whose ops could still beat the best step; the rest were not timed, so the answer is the "
                         "optimum of the plans timed")
    else:
        # every mesh the search simulated is a finalist with its best plan; a single mesh adds its second plan
        finalists = [Finalist(search, plans[0]) for _, _, search, plans in final]
        if len(final) == 1 and len(final[0][3]) > 1:
            finalists.append(Finalist(final[0][2], final[0][3][1]))
        say(f"timing the best configuration{' and the runner-up' if len(finalists) > 1 else ''} as whole steps")
        timed, untimed = time_finalists(pool, finalists, whole, model.layers)
    for entry in reversed(timed):  # each mesh's report shows its fastest whole step
        reports[entry.finalist.key].simulated_step_s = entry.step_time_s
    leader = final[0][2].candidate
    best = choice(timed[0], whole, model.layers)
    second = runner_up(timed)
    runner = choice(second, whole, model.layers) if second is not None else None
    if not request.ignore_memory:  # the memory of the layout chosen (data-parallel replicas repeat model state)
        notes.insert(0, f"memory: recompute {memory.recompute}, {microbatches_text(memory.microbatches)} of {micro} "
                        f"sequences, {best.memory_bytes_per_chip / GB:.1f} GB per chip of "
                        f"{memory.estimate.capacity_bytes / GB:.1f} GB")
    notes.append(slice_note(request.topology, hardware, shapes, best.slice_shape, chips))
    for left in untimed:
        notes.append(f"{name(left.search.candidate)} not timed as a whole step: its ops alone take "
                     f"{ops_bound(left.plan, whole, model.layers):.4g} s, no less than the best's simulated "
                     f"{best.step_time_s:.4g} s")
    count(total, total)
    if (best.slice_shape, best.mesh) != (leader.slice_shape, leader.label):
        notes.append(f"the whole steps reorder the search's estimates: {named(best.mesh, best.slice_shape)} "
                     f"simulated fastest, ahead of the estimates' leader {name(leader)}")
    for item in (best, runner):
        if item is not None and abs(item.step_time_s - item.estimate_step_s) > 0.005 * item.step_time_s:
            notes.append(f"{named(item.mesh, item.slice_shape)}: the simulated step differs from the search's "
                         "estimate (its priced ops and data-parallel tail) by "
                         f"{item.step_time_s / item.estimate_step_s - 1:+.2%}")
    notes.extend(_pricing_notes(searches, request.exhaustive, name))
    return TuneResult(
        model=model.name, hardware=hardware.name, algorithm=algorithm.name, chips=request.chips, batch=whole_batch,
        microbatches=memory.microbatches, prefetch=str(prefetch), recompute=str(memory.recompute),
        attention=str(request.attention), fidelity=str(request.fidelity), zero_stage=request.zero_stage,
        dcn_data=slices,
        exhaustive=request.exhaustive, best=best, runner_up=runner,
        evaluated=sum(len(set(s.twin_prices) | set(s.des_prices)) for s in searches),
        simulated=sum(len(s.des_prices) for s in searches), steps_simulated=len(timed),
        search_space=sum(s.space_size() for s in searches),
        meshes=sorted(reports.values(), key=lambda r: (tuple(int(v) for v in r.mesh.split("x")), r.slice_shape or "")),
        ignore_memory=request.ignore_memory, notes=notes,
        candidates=fastest_per_kind(candidate_of(choice(t, whole, model.layers), request.zero_stage,
                                                 whole_batch * model.sequence) for t in timed),
    )


def _one_slice(request: TuneSpec, batch: int) -> tuple[int, int]:
    """(chips, batch) of one of the request's slices over DCN; the slices must divide both."""
    slices = request.dcn_slices
    if request.chips % slices or batch % slices:
        raise InfeasibleError(f"{slices} slices over DCN do not divide the {request.chips} chips and the batch of "
                              f"{batch} sequences", f"choose chips and a batch that are multiples of {slices}")
    if slices > 1 and request.hardware.slice_network is None:
        raise InfeasibleError(f"dcn_data {slices} joins slices over DCN, which profile {request.hardware.name!r} "
                              "does not describe (no dcn block)", "use a physical profile such as 'tpuv4'")
    return request.chips // slices, batch // slices


def _silent(line: str) -> None:
    del line


def _uncounted(done: int, total: int) -> None:
    del done, total


def _submit(pool: SimulationPool, searches: Sequence[_MeshSearch]) -> PendingTimes:
    """Hand the GeMMs the meshes' DES-priced DPs will simulate to the worker processes, in one batch."""
    return pool.gemm_groups([(search.unsimulated(), search.context.algorithm.name, search.context.hardware,
                              search.candidate.mapping.tensor_mapping, search.context.fidelity)
                             for search in searches])


def _collect(searches: Sequence[_MeshSearch], pending: PendingTimes) -> None:
    """Store the workers' prices in the searches' cache (a worker's error is raised here), and their simulations
    in its context, where the whole steps timed on these meshes find them as one process would."""
    times, entries = pending.result()
    caches = {id(search.pricer.cache): search.pricer.cache for search in searches}  # the searches share one
    for cache in caches.values():
        for key, value in times:
            cache.store(key, value)
        cache.context.timings.adopt(entries)
    for search in searches:
        search.simulations = entries


def _rank(searches: list[_MeshSearch], reports: dict[tuple[str, str], MeshReport], refine_meshes: int,
          layers: int) -> list[_MeshSearch]:
    """Rank the meshes by their analytic best and seed the refinement of the leaders (default search)."""
    ranked = []
    for search in searches:
        plans = search.plans(simulated=False, keep=SEED_PLANS)
        if plans:
            ranked.append((search.ranking_cost(plans[0], layers), search.candidate.key, search, plans))
        reports[search.candidate.key] = _report(search, plans, simulated=False, layers=layers)
    ranked.sort(key=lambda item: item[:2])
    refined = []
    for rank, (cost, _, search, plans) in enumerate(ranked):
        if rank < refine_meshes or cost <= ranked[0][0] * (1 + MESH_MARGIN):
            search.seed_window(plans)
            refined.append(search)
    return refined


def _simulable(searches: list[_MeshSearch], rejected: list[RejectedMesh], notes: list[str]) -> list[_MeshSearch]:
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


def _pricing_notes(searches: list[_MeshSearch], exhaustive: bool, name: Callable[[MeshCandidate], str]) -> list[str]:
    notes = []
    bounded = [name(s.candidate) for s in searches if s.bounded]
    if bounded and not exhaustive:
        more = f" and {len(bounded) - NAMED_MESHES} more" if len(bounded) > NAMED_MESHES else ""
        notes.append(f"meshes ranked by the one-hop bound (multi-hop axes have no closed form): "
                     f"{', '.join(bounded[:NAMED_MESHES])}{more}")
    fallbacks = sum(s.twin_fallbacks for s in searches)
    if fallbacks:
        notes.append(f"{fallbacks} layer options had no closed form and were ranked by their DES price")
    return notes


def _memory_gate(request: TuneSpec, batch: int, candidates: list[MeshCandidate], rejected: list[RejectedMesh],
                 notes: list[str], reserved_bytes: float | None, prefetch: Prefetch,
                 limits: dict[tuple[str, str], PanelLimit]) -> tuple[list[MeshCandidate], list[RejectedMesh]]:
    """Drop the meshes that overflow HBM (unless memory is ignored), with GeMM panels no less than those of any plan
    the search builds from the layer options each mesh's limit admits (``capacity.mesh_memory``; the limits go into
    ``limits`` by mesh key): a mesh kept never overflows with the plan chosen, whose exact figure the whole step
    reports. ``plan_memory`` has already refused a step that fits on no mesh even without panels, with the
    smallest shortfall and what would fit."""
    algorithm = get_algorithm(request.algorithm)
    window = PrefetchWindow(request.prefetch_window, reserved_bytes)
    estimates = []
    for c in candidates:
        estimate, limit = mesh_memory(request.model, c.mesh, batch, request.recompute, request.hardware,
                                      request.bytes_per_param, reserved_bytes, c.data, request.zero_stage,
                                      (request.remat_save, request.remat_offload), algorithm=algorithm,
                                      prefetch=prefetch, window=window, dtype=request.dtype,
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


def _no_mesh(request: TuneSpec, batch: int, rejected: Sequence[RejectedMesh]) -> InfeasibleError:
    hosted = [r for r in rejected if r.host_bytes is not None]
    others = [r for r in rejected if r.host_bytes is None]
    reasons = "; ".join(f"{shown(r.mesh, r.slice_shape)}: {r.reason}" for r in others[:3])
    more = f" (and {len(others) - 3} more)" if len(others) > 3 else ""
    if hosted:  # the layouts that would run on a larger machine are the ones worth naming
        least = min(hosted, key=lambda r: (r.host_bytes or 0.0, r.mesh))
        more += (f"; {len(hosted)} other layout(s) need more memory to simulate than this machine has (the least, "
                 f"{shown(least.mesh, least.slice_shape)}: {least.reason})")
    return InfeasibleError(
        f"no feasible configuration of {request.model.name} with algorithm {request.algorithm!r} on "
        f"{request.chips} chips (batch {batch}): {reasons}{more}",
        "try another chip count, batch or algorithm, or --allow-infeasible to time infeasible meshes anyway",
    )


def _report(search: _MeshSearch, plans: list[Plan], *, simulated: bool, layers: int) -> MeshReport:
    label, shape = search.candidate.label, search.candidate.slice_shape
    if not plans:
        return MeshReport(label, "skipped", "no feasible option for some FF layer (slice counts, mesh rules)",
                          slice_shape=shape)
    estimate = plans[0].cost * layers + search.tail
    if simulated:
        return MeshReport(label, "simulated", None, None, estimate_step_s=estimate, slice_shape=shape)
    return MeshReport(label, "priced", None, estimate, None, slice_shape=shape)
