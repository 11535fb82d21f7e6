"""A training step as a Chrome / Perfetto trace: which chips it shows, the run it records, and what it says of
itself (docs/results.md#traces).

The step's numbers come from its usual runs, traced or not. The trace is one more run of the largest window the
step simulated (every layer with ``--all-layers``; ``window + 1`` layers where the step summed its distinct ops),
recording the traced chips. At symmetric fidelity every chip behaves alike, so the traced chips run their programs
as extra representatives and the run is exact for each of them; at full fidelity every chip runs. Without a
chip list the trace shows the row and column through the first representative, logical chip (0,0) for every
algorithm whose chips all behave alike: every chip its collectives involve, about R + C processes however
large the mesh. Its metadata (``otherData``) and a note name the layers simulated and the critical chip.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpusim.collectives.network import Network
from tpusim.engine.trace import Tracer, row_and_column
from tpusim.model.plan import StepPlan, StepSpec
from tpusim.model.program import HostSchedule, PrefetchWindow, run_ops, step_sequence
from tpusim.units import format_time
from tpusim.vocabulary import Fidelity

__all__ = ["chip_ranges", "trace_step"]

_SAME = 1e-9  # relative: the traced run and the step's window agree to rounding


def trace_step(spec: StepSpec, network: Network, plan: StepPlan, fidelity: Fidelity,
               representatives: Sequence[tuple[int, ...]] | None, sizes: list[int], window_time: float | None,
               step_time: float, chip_slowdown: dict[int, float] | None, tracer: Tracer) -> list[str]:
    """Run the step's largest simulated window (``sizes``; none: the step summed its ops) into ``tracer``; the
    notes for the result. ``window_time`` is that window's elapsed time in the step's own run, when it has one."""
    mapping = network.mapping
    total = spec.model.layers
    layers = sizes[-1] if sizes else min(total, spec.window + 1)
    anchor = mapping.chip(*(representatives[0] if representatives else (0, 0)))
    chosen = tracer.chips is None
    if chosen:
        tracer.chips = row_and_column(mapping, anchor)
    traced = sorted(tracer.chips or ())
    tracer.per_collective = True  # a step's collectives make millions of transfers; one span per port each
    # at symmetric fidelity the traced chips run as representatives: alone where any chip stands for all, else
    # beside the chips the algorithm needs (Cannon's dominating block decides when its groups' collectives start)
    alike = list(representatives or ()) == [(0, 0)]
    # a full run that simulated only the replicas that differ traces every chip: a traced chip of another replica
    # would otherwise run without its replica
    runners = None if representatives is None or fidelity is Fidelity.FULL else sorted(
        (set() if alike else set(representatives)) | {mapping.index_of(chip) for chip in traced})
    run = run_ops(network, step_sequence(plan, layers), plan.gemms, representatives=runners,
                  chip_slowdown=chip_slowdown, window=PrefetchWindow(spec.prefetch_window, spec.prefetch_budget),
                  tracer=tracer, host=HostSchedule.of(plan))
    critical = run.account.critical
    tracer.name_chips(mapping, {critical: "critical"})
    where = ",".join(str(k) for k in mapping.index_of(anchor))
    group = " and its data-parallel group" if mapping.data > 1 else ""
    which = (f"chip {anchor} ({where}) with its logical row and column{group}" if chosen
             else "the chips asked for")
    if layers == total:
        simulated = f"all {total} layers"
    elif sizes:
        simulated = (f"layers 0-{layers - 1} of {total} (the step simulated {sizes[0]} and {sizes[1]} layers and "
                     f"extrapolated)")
    else:
        simulated = (f"layers 0-{layers - 1} of {total} (the step summed each distinct op, simulated once; the ops "
                     "run here one after another)")
    notes = [f"trace: {simulated}, {format_time(run.account.elapsed)}; {len(traced)} chips ({which}), "
             f"critical chip {critical}"]
    if critical not in tracer.chips:  # type: ignore[operator]
        notes.append(f"trace: the critical chip {critical} is not among the traced chips; add it with --trace-chips")
    expected = window_time if window_time is not None else step_time if layers == total else None
    if expected is not None and abs(run.account.elapsed - expected) > _SAME * max(expected, 1e-300):
        notes.append(f"trace: the traced run took {run.account.elapsed!r} s, the step's own run of the same layers "
                     f"{expected!r} s")
    how = ("full: every chip ran its program" if runners is None
           else f"symmetric: the traced chips ran their programs ({len(runners)} chips), the others behave alike")
    tracer.metadata.update({
        "tpusim": "training step", "model": spec.model.name, "algorithm": spec.algorithm.name,
        "hardware": network.hardware.name, "mesh": mapping.layout,
        "fidelity": str(fidelity), "trace_run": how, "layers": total, "traced_layers": simulated,
        "step_layers_simulated": sizes or "each distinct op once", "trace_time_s": run.account.elapsed,
        "step_time_s": step_time, "traced_chips": chip_ranges(traced), "traced_chips_rule": which,
        "critical_chip": critical,
        "names": "L<layer> <fwd|recompute|bwd-data|bwd-weight|bwd> <op> [K<k>/<K> gemm|<collective>]; "
                 "step <op> once per step; layers from 0",
    })
    return notes


def chip_ranges(chips: Sequence[int]) -> str:
    """Sorted chip ids as ``0-7,8,16,24-25``."""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive ids
    for chip in chips:
        if runs and chip == runs[-1][1] + 1:
            runs[-1][1] = chip
        else:
            runs.append([chip, chip])
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs)
