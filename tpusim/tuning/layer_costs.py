"""Pricing the pieces of a step: one FF layer option (its GeMMs), and the non-FF ops of a layer.

A step runs its ops one after another on every chip, so its time is the sum of its ops' times: per FF
layer, the forward, backward-data and backward-weight GeMMs (the forward twice under full
recomputation), plus the non-FF ops (norms, attention, residuals, LayerNorm all-reduces), which depend
only on the mesh and on the feature axis the LayerNorms reduce over. A GeMM is priced either by its
algorithm's closed-form twin (tens of microseconds; None where no closed form exists) or by the
discrete-event simulation (DES) at the requested fidelity. Where an axis is embedded with multi-hop
steps (split physical axes) the twins claim no closed form, because groups share links; there the
``bound`` is the twin of the same mesh with one hop per ring step: store-and-forward over more hops and
contention only add time, so it is an optimistic estimate, good for ranking without full-fidelity DES.
``CostCache`` keys every GeMM time by everything that determines it, so a GeMM shared by two layers or
two passes is priced once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from tpusim.collectives.network import Network
from tpusim.config import HardwareProfile
from tpusim.engine.context import Context
from tpusim.gemm.algorithm import GemmAlgorithm
from tpusim.gemm.costs import CostModel, NoClosedForm
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.fidelity import resolve_fidelity
from tpusim.gemm.hoisted import hoisted_time, hoists
from tpusim.gemm.params import GemmParams
from tpusim.gemm.simulate import analytic_gemm, simulate_gemm
from tpusim.hardware import ChipModel
from tpusim.model.layer import FF_LAYERS, FFLayer, GemmOp, LocalOp, NormStatsOp, Op, Pass
from tpusim.model.plan import StepSpec, plan_block
from tpusim.model.program import run_ops
from tpusim.topology import MeshMapping
from tpusim.tuning.space import LayerOption, layer_problems
from tpusim.vocabulary import CollectiveOp, Fidelity

ANALYTIC = "analytic"


def hoisted_mode(fidelity: Fidelity) -> str:
    """The pricing mode of a GeMM timed from when its early transfers have arrived (``CostCache.hoisted``)."""
    return f"hoisted {fidelity}"


Job = tuple[tuple[Any, ...], GemmProblem, GemmParams, bool]
"""A GeMM to price by simulation: (cache key, problem, parameters, whether it is timed hoisted)."""


def one_hop(mapping: MeshMapping) -> MeshMapping:
    """The same placement with every ring step counted as a single hop (no link shared between groups)."""
    if all(axis.max_hops <= 1 for axis in mapping.axes):
        return mapping
    first, second = (replace(axis, max_hops=1) if axis.max_hops > 1 else axis for axis in mapping.axes)
    return replace(mapping, axes=(first, second))


def mapping_key(mapping: MeshMapping) -> tuple[Any, ...]:
    """What identifies a placement for timing: shape, topology and each axis's physical embedding."""
    topology = mapping.topology.name if mapping.topology is not None else "abstract"
    axes = tuple((a.size, a.physical, a.embedding, a.closed, a.max_hops) for a in mapping.axes)
    return (mapping.shape, topology, axes)


class CostCache:
    """GeMM times keyed by (problem, algorithm, params, hardware, mapping, pricing mode).

    ``twins`` and ``simulations`` count the GeMMs actually priced (cache misses) by each method.
    """

    def __init__(self, context: Context | None = None) -> None:
        self.context = context if context is not None else Context()
        self._times: dict[Hashable, float | None] = {}
        self.twins = 0
        self.simulations = 0

    @staticmethod
    def key(problem: GemmProblem, algorithm: GemmAlgorithm, params: GemmParams, hardware_key: str,
            mapping: MeshMapping, mode: str) -> tuple[Any, ...]:
        return (problem, algorithm.name, params, hardware_key, mapping_key(mapping), mode)

    def holds(self, key: Hashable) -> bool:
        return key in self._times

    def store(self, key: Hashable, value: float) -> None:
        """A time priced elsewhere (by a worker process of ``tune --jobs``) under the key it would have here."""
        self._times[key] = value

    def gemm(self, problem: GemmProblem, algorithm: GemmAlgorithm, params: GemmParams, network: Network,
             hardware_key: str, mode: str) -> float | None:
        """The GeMM's time on ``network`` (a model on this cache's context) by ``mode``: "analytic" (None without
        a closed form) or a Fidelity value."""
        key = self.key(problem, algorithm, params, hardware_key, network.mapping, mode)
        if key in self._times:
            return self._times[key]
        if mode == ANALYTIC:
            self.twins += 1
            value = analytic_gemm(algorithm, problem, params, network)
        else:
            self.simulations += 1
            value = simulate_gemm(problem, algorithm, params, network, fidelity=Fidelity(mode)).time_s
        self._times[key] = value
        return value

    def hoisted(self, problem: GemmProblem, algorithm: GemmAlgorithm, params: GemmParams, network: Network,
                hardware_key: str, fidelity: Fidelity) -> float:
        """The GeMM's time once its early transfers have arrived (``gemm.hoisted``), simulated at ``fidelity``."""
        if not hoists(algorithm, problem, params, network.mapping.shape):  # its own time: one price, one key
            value = self.gemm(problem, algorithm, params, network, hardware_key, str(fidelity))
            assert value is not None
            return value
        key = self.key(problem, algorithm, params, hardware_key, network.mapping, hoisted_mode(fidelity))
        if key not in self._times:
            self.simulations += 1
            self._times[key] = hoisted_time(problem, algorithm, params, network, fidelity)
        value = self._times[key]
        assert value is not None
        return value


@dataclass(frozen=True)
class PricingContext:
    """What every price of one search shares."""

    network: Network  # the request's model: each mesh prices on its own placement of it (``Network.over``)
    algorithm: GemmAlgorithm
    base: GemmParams  # prefetch, block and variant; the slice count comes from each option
    dtype: str
    fidelity: Fidelity  # of the DES prices (auto resolves per GeMM: symmetric where exact)
    multiplicity: tuple[tuple[str, Pass, int], ...]  # how often each layer's pass runs in one step layer

    @property
    def hardware(self) -> HardwareProfile:
        return self.network.hardware

    @property
    def hardware_key(self) -> str:
        # a profile loaded from a file may reuse a registered name: key on the content too
        return self.hardware.model_dump_json()


def pass_multiplicity(spec: StepSpec, mesh: tuple[int, int]) -> tuple[tuple[str, Pass, int], ...]:
    """How many times each (layer, pass) GeMM runs per layer of the step (2 forwards under full recompute)."""
    forward, backward, _ = plan_block(spec, mesh)
    counts = Counter((op.layer.removeprefix("recompute."), op.which) for op in forward + backward
                     if isinstance(op, GemmOp))
    return tuple((layer, which, counts[(layer, which)]) for layer in FF_LAYERS for which in Pass)


class LayerPricer:
    """Prices FF layer options on one mesh (``network``, a model on the cache's context) by twin or by DES,
    through a shared cache."""

    def __init__(self, context: PricingContext, network: Network, cache: CostCache) -> None:
        self.context = context
        self.network = network
        self.mapping = mapping = network.mapping
        self.relaxed = network.over(one_hop(mapping))  # the model ``bound`` prices on
        self.cache = cache
        self._hardware_key = context.hardware_key
        self._times = {(layer, which): n for layer, which, n in context.multiplicity}

    def _gemms(self, layer: FFLayer, option: LayerOption) -> Iterator[tuple[int, GemmProblem, GemmParams]]:
        """The layer's GeMMs under ``option`` that a step runs at all: (times per step, problem, parameters)."""
        params = replace(self.context.base, slices=option.slices)
        for which, problem in layer_problems(layer, option, self.context.dtype).items():
            times = self._times.get((layer.name, which), 1)
            if times:
                yield times, problem, params

    def _total(self, layer: FFLayer, option: LayerOption, mode: str, relaxed: bool = False) -> float | None:
        ctx = self.context
        network = self.relaxed if relaxed else self.network
        total = 0.0
        for times, problem, params in self._gemms(layer, option):
            value = self.cache.gemm(problem, ctx.algorithm, params, network, self._hardware_key, mode)
            if value is None:
                return None
            total += times * value
        return total

    def analytic(self, layer: FFLayer, option: LayerOption) -> float | None:
        """Sum of the layer's GeMM twins, or None when one of them has no closed form."""
        return self._total(layer, option, ANALYTIC)

    def bound(self, layer: FFLayer, option: LayerOption) -> float | None:
        """The twin with one hop per ring step: optimistic where the true embedding is multi-hop."""
        if self.relaxed is self.network:
            return None
        return self._total(layer, option, ANALYTIC, relaxed=True)

    def simulated(self, layer: FFLayer, option: LayerOption) -> float:
        """Sum of the layer's GeMMs as simulated at the context's fidelity."""
        value = self._total(layer, option, str(self.context.fidelity))
        assert value is not None
        return value

    def hoisted(self, layer: FFLayer, option: LayerOption) -> float:
        """Sum of the layer's GeMMs, each timed from when its early transfers have arrived: the least the layer can
        take inside a step (``gemm.hoisted``)."""
        ctx = self.context
        return sum(times * self.cache.hoisted(problem, ctx.algorithm, params, self.network, self._hardware_key,
                                              ctx.fidelity)
                   for times, problem, params in self._gemms(layer, option))

    def unsimulated(self, layer: FFLayer, option: LayerOption, hoisted: bool = False) -> list[Job]:
        """The GeMMs ``simulated`` (``hoisted``: ``hoisted``) would run for ``option`` that the cache does not hold
        yet: (cache key, problem, parameters, hoisted) each."""
        ctx = self.context
        found = []
        for _, problem, params in self._gemms(layer, option):
            bound = hoisted and hoists(ctx.algorithm, problem, params, self.mapping.shape)
            key = self.cache.key(problem, ctx.algorithm, params, self._hardware_key, self.mapping,
                                 hoisted_mode(ctx.fidelity) if bound else str(ctx.fidelity))
            if not self.cache.holds(key):
                found.append((key, problem, params, bound))
        return found


def _non_ff_ops(spec: StepSpec, mesh: tuple[int, int]) -> list[Op]:
    forward, backward, _ = plan_block(spec, mesh)
    return [op for op in forward + backward if not isinstance(op, GemmOp)]


def non_ff_twin(spec: StepSpec, network: Network) -> float | None:
    """Closed-form time of one layer's non-FF ops on ``network`` under ``spec``'s layouts, or None without a
    closed form."""
    twin = _NonFFTwin(network)
    try:
        return sum((op.accept(twin) for op in _non_ff_ops(spec, network.mapping.shape)), 0.0)
    except NoClosedForm:
        return None


class _NonFFTwin:
    """The closed-form time of each non-FF op of a block on ``network`` (``op_kinds.BlockOpVisitor``); raises
    ``NoClosedForm`` where a collective has none."""

    def __init__(self, network: Network) -> None:
        self.network = network
        self.chip = ChipModel(network.hardware.chip)

    def gemm(self, op: GemmOp) -> float:
        raise ValueError(f"{op.name} is an FF GeMM, priced by its layer option, not as a non-FF op")

    def local(self, op: LocalOp) -> float:
        return self.chip.op_time(op.flops, op.hbm_bytes, op.vector_ops)

    def norm_stats(self, op: NormStatsOp) -> float:
        if self.network.mapping.shape[op.axis] <= 1 or not op.elements:
            return 0.0
        return CostModel(self.network, op.dtype).collective(CollectiveOp.ALL_REDUCE, op.axis, 2 * op.elements)


def non_ff_time(spec: StepSpec, network: Network, fidelity: Fidelity) -> float:
    """Simulated time of one layer's non-FF ops (forward and backward) on ``network`` under ``spec``'s layouts,
    run by the step program itself."""
    mode, _ = resolve_fidelity(fidelity, network.asymmetry(overrides=False))
    sequence = [(op, 0) for op in _non_ff_ops(spec, network.mapping.shape)]
    return run_ops(network, sequence, {}, representatives=[(0, 0)] if mode is Fidelity.SYMMETRIC else None
                   ).account.elapsed
