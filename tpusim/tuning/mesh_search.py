"""One candidate mesh's search: its layer options (those whose GeMM panels its memory limit admits), their
closed-form (twin) and DES prices, its best plans by the DP over layout flags (``dp``), and the window of options
its DES refinement may use.

The ranking (``ranking``) asks each mesh for its analytic plans and seeds the window around the best of them; the
refinement (``refinement``) prices the window by DES and asks for the plans again; the whole-step timing
(``finalists``) simulates the plans it keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tpusim.collectives.network import Network
from tpusim.engine.context import Context
from tpusim.gemm.fidelity import resolve_fidelity, symmetric_obstacle
from tpusim.model.layer import FF_LAYERS, FFLayer, kv_heads_on_mesh
from tpusim.model.step import StepSpec
from tpusim.tuning.capacity import PanelLimit, option_panels
from tpusim.tuning.dp import STAGES, Plan, best_plans, count_plans, output_flag
from tpusim.tuning.layer_costs import CostCache, Job, LayerPricer, PricingContext, non_ff_time, non_ff_twin
from tpusim.tuning.parallel import Entries
from tpusim.tuning.result import MeshReport
from tpusim.tuning.space import LayerOption, MeshCandidate, layer_options
from tpusim.vocabulary import Dataflow, Fidelity

OPTION_MARGIN = 0.05  # another dataflow this close to a chosen option's twin is simulated too


class MeshSearch:
    """The options, prices and plans of one candidate mesh."""

    def __init__(self, candidate: MeshCandidate, layers: tuple[FFLayer, ...], context: PricingContext,
                 cache: CostCache, spec: StepSpec, whole: StepSpec, flips: bool, dataflows: tuple[Dataflow, ...],
                 limit: PanelLimit) -> None:
        self.candidate = candidate
        self.limit = limit  # the GeMM panels an option may hold (``capacity.mesh_memory``)
        self.dataflows = dataflows
        self.layers = layers
        self.context = context
        self.pricer = LayerPricer(context, context.network.over(candidate.mapping.tensor_mapping,
                                                                context=cache.context), cache)
        self.tail = 0.0  # seconds per step of data-parallel synchronisation the ranking charges (``data_tail``)
        self.spec = spec  # one replica's micro-batch, which the options are priced for
        self.whole = whole  # the whole step its plans are timed as (every replica, micro-batch and slice)
        self.flips = flips
        self.twin_prices: dict[tuple[int, LayerOption], float] = {}
        self.des_prices: dict[tuple[int, LayerOption], float] = {}
        self.hoisted_prices: dict[tuple[int, LayerOption], float] = {}  # what bounds a whole step (``lower_bound``)
        self.window: set[tuple[int, LayerOption]] | None = None  # what the DES-priced DP may use
        self.bounded = 0  # options ranked by the one-hop bound
        self.twin_fallbacks = 0  # options ranked by DES for want of any closed form
        self.simulations: Entries = []  # what worker processes simulated for this mesh (``tune --jobs``)
        obstacle = symmetric_obstacle(context.algorithm, context.base, self.pricer.network)
        self.full = resolve_fidelity(context.fidelity, obstacle)[0] is Fidelity.FULL
        self._options: dict[tuple[int, bool], list[LayerOption]] = {}

    @property
    def step_context(self) -> Context:
        """Where whole steps on this mesh are simulated: the search's context, holding its GeMM timings."""
        return self.pricer.cache.context

    @property
    def step_network(self) -> Network:
        """The model whole steps on this mesh run on: the candidate's whole layout, on ``step_context``."""
        return self.context.network.over(self.candidate.mapping, context=self.step_context)

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

    def by_hoisted(self, index: int, flag: bool, required: bool | None) -> list[tuple[LayerOption, float]]:
        return [(o, self._hoisted(index, o)) for o in self.windowed(index, flag, required)]

    def _hoisted(self, index: int, option: LayerOption) -> float:
        key = (index, option)
        if key not in self.hoisted_prices:
            self.hoisted_prices[key] = self.pricer.hoisted(self.layers[index], option)
        return self.hoisted_prices[key]

    def lower_bound(self, plan: Plan) -> float:
        """The least one layer of ``plan`` (DES-priced) can take inside a whole step: its ops with every early
        transfer the prefetch policy may start before its GeMM already arrived (``gemm.hoisted``)."""
        return plan.cost - self._hoisting(plan)

    def bounded_plans(self, keep: int) -> list[Plan]:
        """The ``keep`` DES-priced plans of least ``lower_bound``, in that order, each carrying its DES cost."""
        found = best_plans(self.by_hoisted, self.non_ff(True), flips=self.flips, attention_ok=self.attention_ok,
                           keep=keep)
        return [replace(plan, cost=plan.cost + self._hoisting(plan)) for plan in found]

    def _hoisting(self, plan: Plan) -> float:
        """What the early transfers of ``plan``'s GeMMs cost per layer beyond their hoisted times."""
        return sum(self._simulate(index, option) - self._hoisted(index, option)
                   for index, option in enumerate(plan.options))

    def non_ff(self, simulated: bool) -> dict[bool, float]:
        """Per allowed start layout, one layer's non-FF time (twin for ranking, DES for the final DP)."""
        times = {}
        for start in self.starts:
            spec = replace(self.spec, transposes=(start,) * len(FF_LAYERS))
            pricer = self.pricer
            twin = None
            if not simulated:
                twin = non_ff_twin(spec, pricer.network)
                twin = twin if twin is not None else non_ff_twin(spec, pricer.relaxed)
            times[start] = twin if twin is not None else non_ff_time(spec, pricer.network, self.context.fidelity)
        return times

    def ranking_cost(self, plan: Plan, layers: int) -> float:
        """What meshes are ranked by: ``plan``'s per-layer cost over every micro-batch, with the data-parallel tail
        spread over ``layers`` (meshes searched under different micro-batch counts rank by their whole steps)."""
        return plan.cost * self.whole.microbatches + self.tail / layers

    def plans(self, simulated: bool, keep: int) -> list[Plan]:
        priced = self.by_simulation if simulated else self.by_twin
        return best_plans(priced, self.non_ff(simulated), flips=self.flips, attention_ok=self.attention_ok,
                          keep=keep)

    def unsimulated(self, bounds: bool = False) -> list[Job]:
        """The GeMMs ``plans(simulated=True)`` will simulate, found by a dry run of the DP: which options it asks
        for depends on the options alone, never on their prices. With ``bounds``, also the hoisted GeMMs
        ``bounded_plans`` will time for the same options. (cache key, problem, parameters, hoisted) each, once."""
        asked: dict[tuple[int, LayerOption], None] = {}

        def record(index: int, flag: bool, required: bool | None) -> list[tuple[LayerOption, float]]:
            found = [(o, 0.0) for o in self.windowed(index, flag, required)]
            asked.update(((index, o), None) for o, _ in found)
            return found

        best_plans(record, dict.fromkeys(self.starts, 0.0), flips=self.flips, attention_ok=self.attention_ok,
                   keep=1)
        gemms: dict[tuple[Any, ...], Job] = {}
        for index, option in asked:
            wanted = [(False, self.des_prices), (True, self.hoisted_prices)] if bounds else [(False, self.des_prices)]
            for hoisted, held in wanted:
                if (index, option) not in held:
                    gemms.update({job[0]: job for job in self.pricer.unsimulated(self.layers[index], option,
                                                                                 hoisted)})
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



def mesh_report(search: MeshSearch, plans: list[Plan], *, simulated: bool, layers: int) -> MeshReport:
    """The mesh's entry in a result's ``meshes``: skipped, priced by its closed forms, or simulated."""
    label, shape = search.candidate.label, search.candidate.slice_shape
    if not plans:
        return MeshReport(label, "skipped", "no feasible option for some FF layer (slice counts, mesh rules)",
                          slice_shape=shape)
    estimate = plans[0].cost * layers * search.whole.microbatches + search.tail
    if simulated:
        return MeshReport(label, "simulated", None, None, estimate_step_s=estimate, slice_shape=shape)
    return MeshReport(label, "priced", None, estimate, None, slice_shape=shape)
