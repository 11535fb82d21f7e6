"""The tuner's closed-form price of data parallelism: what of a step's data-parallel synchronisation no compute
hides.

A layout's gradient buckets overlap the backward pass of the blocks below them and its weight gathers the blocks
before them (``tpusim.model.data_parallel``), except at the ends: the last block's bucket has nothing left to
hide behind, nor has the first block's first weight gather (ZeRO >= 1), nor, under ZeRO 3, the gather the backward
pass opens with. Across slices over DCN, the last bucket's shard is all-reduced after it, with nothing left to hide
behind either. The ranking charges those at their closed-form times; the whole steps the search ends with are
simulated, overlap limits and all.
"""

from __future__ import annotations

from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.dcn import dcn_twin
from tpusim.collectives.network import Network
from tpusim.config import TransformerModel
from tpusim.engine.context import Context
from tpusim.model.data_parallel import DATA_AXIS, SYNCED_DTYPE, DataSyncOp, data_parallel_plan
from tpusim.tuning.space import MeshCandidate
from tpusim.units import dtype_bytes

__all__ = ["data_parallel_tail"]


def data_parallel_tail(candidate: MeshCandidate, request: Network, model: TransformerModel,
                       zero_stage: int, dcn_slices: int = 1) -> float:
    """Seconds per step of ``candidate``'s data-parallel collectives the ranking assumes exposed (0 for one replica
    on one slice), on each of ``dcn_slices`` slices; ``request`` is the request's model, whose placement of the
    candidate prices them."""
    hardware = request.hardware
    plan = data_parallel_plan(model, candidate.mesh, candidate.data, zero_stage, dcn_slices=dcn_slices,
                              combine_bytes=hardware.combine_threshold)
    if plan is None:
        return 0.0
    network = request.over(candidate.mapping, context=Context())

    def twin(op: DataSyncOp) -> float:
        if op.collective is None:  # nothing on the data axis (the tuner's layouts are of one slice)
            return 0.0
        found = network.twin(CollectiveCall(op.collective, DATA_AXIS, op.nbytes))
        return found if found is not None else 0.0

    first, final = plan.parts[0][0], plan.parts[-1][0]
    last = plan.gradients(0, first)  # the backward pass ends with the block's first collective's bucket
    exposed = [last]
    if plan.gathers_forward:
        exposed.append(plan.weights(0, first))
    if plan.gathers_backward:  # without recomputation the backward pass opens with the block's last matrix
        exposed.append(plan.weights(0, final))
    across = 0.0
    dcn = hardware.slice_network
    if last.dcn_elements and dcn is not None:
        across = dcn_twin(dcn, last.dcn_collective, last.dcn_elements * dtype_bytes(SYNCED_DTYPE), dcn_slices)
    return sum(twin(op) for op in exposed) + across
