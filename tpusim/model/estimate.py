"""What simulating one training step will cost, before it runs (``engine.footprint``).

The step is probed as ``model.step`` would simulate it: the same plan, fidelity, windows of layers and micro-step
runs, each window run on one representative chip and on two with timing-only operands, on a network that runs
each distinct collective once (``collectives.physical.probe``). ``full_events`` turns the
probes into the full run's events (exact where symmetric fidelity is exact); a symmetric step costs about what its
representative's probes cost. A step already in the timing cache costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tpusim.collectives.network import Network
from tpusim.collectives.physical.probe import probe_network
from tpusim.engine.cache import cache_key
from tpusim.engine.footprint import Estimate, check_events_memory, full_events, step_footprint
from tpusim.gemm.estimate import second_representative
from tpusim.gemm.fidelity import representative_chips, resolve_fidelity, symmetric_obstacle
from tpusim.model.plan import StepSpec, plan_step
from tpusim.model.program import HostSchedule, PrefetchWindow, run_ops, step_sequence
from tpusim.model.replicas import replica_representatives
from tpusim.model.step import dcn_sharded_fidelity, every_layer_refusal
from tpusim.vocabulary import Fidelity, Recompute

__all__ = ["step_estimate"]


def step_estimate(spec: StepSpec, network: Network) -> Estimate:
    """The cost of simulating ``spec`` on ``network``'s hardware and mapping (``simulate_step``), on its context; a
    step the run would refuse raises the run's error. A ``probe_network`` shared by a request's estimates runs each
    distinct collective once."""
    if spec.recompute is Recompute.AUTO:
        raise ValueError("resolve recompute auto (model.memory.plan_memory) before estimating a step")
    if spec.microbatches > 1:  # a micro-step with the optimizer update and one without (``model.step``)
        return step_estimate(replace(spec, batch=spec.batch // spec.microbatches, microbatches=1), network).times(2)
    if network.context.timings.get(cache_key("step", spec, network.hardware, network.mapping.describe(), None,
                                             None)) is not None:
        return Estimate(0)
    return _probed(spec, probe_network(network))


def _probed(spec: StepSpec, network: Network) -> Estimate:
    hardware, mapping = network.hardware, network.mapping
    mesh, data, slices = mapping.shape, mapping.data, spec.dcn_slices
    spec = replace(spec, batch=spec.batch // (data * slices))
    plan = plan_step(spec, mesh, data, hardware.combine_threshold)
    algorithm = next(iter(plan.gemms.values())).algorithm
    obstacle = symmetric_obstacle(algorithm, plan.params, network)
    fidelity = resolve_fidelity(spec.fidelity, obstacle)[0]
    if fidelity is Fidelity.ANALYTIC:  # refused by the run before it simulates
        return Estimate(0)
    if spec.dcn_sharded and fidelity is Fidelity.SYMMETRIC:
        fidelity = dcn_sharded_fidelity(spec.fidelity)
    total = spec.model.layers
    sizes = [spec.window, spec.window + 1] if spec.extrapolate and not spec.dcn_sharded and total > spec.window + 1 \
        else [total]
    host = HostSchedule.of(plan)

    def probe(layers: int, representatives: Sequence[tuple[int, ...]]) -> tuple[int, tuple[int, int]]:
        run = run_ops(network, step_sequence(plan, layers), plan.gemms, representatives=representatives,
                      window=PrefetchWindow(spec.prefetch_window, spec.prefetch_budget), host=host, dcn_slices=slices)
        return run.events + run.link_events[0], run.link_events

    kept = replica_representatives(mapping, None, None) if slices == 1 else None
    chips = len(kept) if kept is not None else mapping.num_chips
    alike = obstacle is None

    def window(layers: int) -> Estimate:
        if fidelity is Fidelity.SYMMETRIC:
            events, links = probe(layers, list(representative_chips(algorithm, plan.params, network)))
            return Estimate(events, links[0])
        one, links = probe(layers, [(0, 0)])
        two = probe(layers, [(0, 0), second_representative(mesh)])[0] if alike and chips > 1 else one
        return full_events(one, two, links, chips, alike=alike, floor_bytes=step_footprint(mapping, True)[0])

    if sizes == [total] and total > spec.window + 1:
        # every layer in one run: two windows, extrapolated as the run's own memory check does (``model.step``)
        short, longer = window(spec.window), window(spec.window + 1)
        events = short.events + (total - spec.window) * (longer.events - short.events)
        check_events_memory(events, *every_layer_refusal(spec, total))
        return Estimate(events, short.link_events + (total - spec.window) * (longer.link_events - short.link_events),
                        floor_bytes=short.floor_bytes)
    total_cost = Estimate(0)
    for n in sizes:
        total_cost = total_cost + window(n)
    return total_cost
