"""Per-chip memory of a training step: weights, gradients, optimizer state and stored activations.

Parameters cost ``bytes_per_param`` each (16: bf16 weights and gradients plus fp32 master weights and
Adam moments) and are sharded over all chips. Stored activations follow Korthikanti et al. (2022),
"Reducing Activation Recomputation in Large Transformer Models", per layer with tensor parallelism t and
sequence parallelism (everything sharded over the t = P chips): no recomputation s b h (34 + 5 a s / h) / t
bytes; selective recomputation (attention recomputed) 34 s b h / t; full recomputation only each layer's
input, 2 s b h / t. A batch split into m micro-batches (gradients accumulated) stores the activations of one
micro-batch at a time.

With data parallelism (``data_parallel`` D replicas of a tensor-parallel group of t = P / D chips, each replica
training batch / D sequences) the model state splits as ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models") says: of the ``bytes_per_param``, 2 are bf16 weights, 2
bf16 gradients and the rest optimizer state (fp32 master weights and Adam moments); stage 0 replicates all of it
over D, stage 1 shards the optimizer state over D, stage 2 the gradients too, stage 3 the weights too. D = 1 is
2D tensor parallelism over every chip, exactly as before.

``plan_memory`` makes a configuration fit: ``recompute auto`` takes the least recomputation that fits, and an
open micro-batch count takes the fewest micro-batches that fit under full recomputation when no recomputation
fits the whole batch (docs/workloads.md#memory).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpusim.config import TransformerModel
from tpusim.errors import InfeasibleError, UserError
from tpusim.units import GB
from tpusim.vocabulary import Recompute, check_zero_stage

LEVELS = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)  # least recomputation first


@dataclass(frozen=True)
class MemoryEstimate:
    parameters_bytes: float
    activations_bytes: float
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.parameters_bytes + self.activations_bytes

    @property
    def feasible(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    @property
    def shortfall_bytes(self) -> float:
        return max(self.total_bytes - self.capacity_bytes, 0.0)


def microbatches_text(count: int) -> str:
    """``"1 micro-batch"``, ``"8 micro-batches"``: how messages and summaries name a micro-batch count."""
    return f"{count} micro-batch{'es' if count != 1 else ''}"


def _usable(capacity_bytes: float, reserved_bytes: float | None) -> float:
    """The HBM left for the model once ``reserved_bytes`` (the prefetch window's budget of gathered buffers)
    are set aside."""
    return capacity_bytes - (reserved_bytes or 0.0)


WEIGHT_BYTES = 2  # bf16 weights
GRADIENT_BYTES = 2  # bf16 gradients


def state_bytes_per_param(bytes_per_param: float, data_parallel: int, zero_stage: int) -> float:
    """Bytes of model state per parameter of a tensor-parallel shard, after ZeRO sharding over ``data_parallel``."""
    optimizer = bytes_per_param - WEIGHT_BYTES - GRADIENT_BYTES
    if optimizer < 0:
        raise InfeasibleError(f"bytes per parameter {bytes_per_param!r} must cover the bf16 weights and gradients "
                              f"({WEIGHT_BYTES + GRADIENT_BYTES} bytes) to shard them over data-parallel replicas")
    shard = 1.0 / data_parallel
    stage = check_zero_stage(zero_stage)
    return (WEIGHT_BYTES * (shard if stage >= 3 else 1.0) + GRADIENT_BYTES * (shard if stage >= 2 else 1.0)
            + optimizer * (shard if stage >= 1 else 1.0))


def layout_state_bytes_per_param(bytes_per_param: float, fsdp: int, data: int, zero_stage: int) -> float:
    """Bytes of model state per parameter of a tensor-parallel shard in a named layout: ``fsdp`` chips (every fsdp
    axis, ICI and DCN, multiplied) shard weights, gradients and optimizer state alike, and ``data`` chips (every
    data axis) shard them further as ZeRO ``zero_stage`` says (docs/workloads.md#layouts). fsdp = 1 is
    ``state_bytes_per_param`` over the data axes; data = 1 is ZeRO 3 over the fsdp axes."""
    if fsdp == 1 and data == 1:
        return bytes_per_param
    # stage 0 over one chip is the whole state, after the check that bytes_per_param covers weights and gradients
    return state_bytes_per_param(bytes_per_param, data, zero_stage if data > 1 else 0) / fsdp


def estimate_memory(model: TransformerModel, chips: int, batch: int, recompute: Recompute,
                    capacity_bytes: float, bytes_per_param: float = 16.0, *,
                    reserved_bytes: float | None = None, data_parallel: int = 1,
                    zero_stage: int = 0) -> MemoryEstimate:
    """Memory per chip of the whole model on ``chips`` chips: ``data_parallel`` replicas (each training
    ``batch / data_parallel`` sequences) of 2D (or 1D) tensor parallelism over ``chips / data_parallel`` chips,
    the model state sharded as ZeRO ``zero_stage`` says; against the capacity left after ``reserved_bytes``."""
    if data_parallel < 1 or chips % data_parallel or batch % data_parallel:
        raise UserError(f"{data_parallel} data-parallel replicas must divide the {chips} chips and the batch of "
                              f"{batch} sequences")
    group = chips // data_parallel
    per_param = (bytes_per_param if data_parallel == 1
                 else state_bytes_per_param(bytes_per_param, data_parallel, zero_stage))
    params = model.params_per_layer * model.layers * per_param / group
    s, b, h, a = model.sequence, batch // data_parallel, model.hidden, model.heads
    per_layer = {
        Recompute.NONE: s * b * h * (34 + 5 * a * s / h),
        Recompute.SELECTIVE: 34 * s * b * h,
        Recompute.FULL: 2 * s * b * h,
    }[recompute]
    return MemoryEstimate(params, per_layer * model.layers / group, _usable(capacity_bytes, reserved_bytes))


@dataclass(frozen=True)
class MemoryPlan:
    """How a step fits in HBM: its recomputation, its micro-batch count and the resulting estimate."""

    recompute: Recompute
    microbatches: int
    estimate: MemoryEstimate


def plan_memory(model: TransformerModel, chips: int, batch: int, recompute: Recompute, microbatches: int | None,
                capacity_bytes: float, bytes_per_param: float = 16.0, *, ignore_memory: bool = False,
                reserved_bytes: float | None = None, data_parallel: int = 1, zero_stage: int = 0) -> MemoryPlan:
    """The recomputation and micro-batch count a step runs with (see the module docstring).

    ``recompute`` AUTO and ``microbatches`` None are open choices; explicit values are kept. Unless memory is
    ignored, a configuration that cannot fit raises ``InfeasibleError`` naming the smallest shortfall and what
    would fit.
    """
    capacity_bytes = _usable(capacity_bytes, reserved_bytes)
    shards = {"data_parallel": data_parallel, "zero_stage": zero_stage}
    levels = LEVELS if recompute is Recompute.AUTO else (recompute,)
    counts = [microbatches] if microbatches is not None else [1]
    if ignore_memory:
        level, count = levels[0], counts[0]
        return MemoryPlan(level, count, estimate_memory(model, chips, batch // count, level, capacity_bytes,
                                                         bytes_per_param, **shards))
    if microbatches is None:
        counts += [m for m in range(2, batch + 1) if batch % m == 0 and (batch // m) % data_parallel == 0]
    tried: list[MemoryPlan] = []
    for count in counts:
        for level in levels if count == 1 else levels[-1:]:
            estimate = estimate_memory(model, chips, batch // count, level, capacity_bytes, bytes_per_param, **shards)
            found = MemoryPlan(level, count, estimate)
            if estimate.feasible:
                return found
            tried.append(found)
    smallest = min(tried, key=lambda plan: plan.estimate.shortfall_bytes)
    raise InfeasibleError(_shortfall(model, chips, batch, recompute, microbatches, smallest),
                          _what_fits(model, chips, batch, capacity_bytes, bytes_per_param, shards))


def _shortfall(model: TransformerModel, chips: int, batch: int, recompute: Recompute, microbatches: int | None,
               smallest: MemoryPlan) -> str:
    asked = f"recompute {recompute}" + (
        f", {microbatches_text(microbatches)}" if microbatches else "")
    estimate = smallest.estimate
    return (f"{model.name} on {chips} chips (batch {batch}, {asked}) does not fit in HBM: the smallest shortfall is "
            f"{estimate.shortfall_bytes / GB:.1f} GB per chip ({estimate.total_bytes / GB:.1f} GB of "
            f"{estimate.capacity_bytes / GB:.1f} GB with recompute {smallest.recompute}, "
            f"{microbatches_text(smallest.microbatches)})")


def _what_fits(model: TransformerModel, chips: int, batch: int, capacity_bytes: float, bytes_per_param: float,
               shards: dict[str, int]) -> str:
    """The least change that fits, or why nothing on this many chips can."""
    data = shards["data_parallel"]
    for count in (m for m in range(1, batch + 1) if batch % m == 0 and (batch // m) % data == 0):
        for level in LEVELS:
            estimate = estimate_memory(model, chips, batch // count, level, capacity_bytes, bytes_per_param, **shards)
            if estimate.feasible:
                micro = f" --microbatches {count}" if count > 1 else ""
                return (f"--recompute {level}{micro} fits ({estimate.total_bytes / GB:.1f} GB per chip); or "
                        "--ignore-memory to time it anyway")
    weights = estimate_memory(model, chips, data, Recompute.FULL, capacity_bytes, bytes_per_param,
                              **shards).parameters_bytes
    return (f"the weights, gradients and optimizer state alone take {weights / GB:.1f} GB per chip; use more chips, "
            "or --ignore-memory to time it anyway")
