"""The index columns of plans and merged programs: 32-bit below 2^31 entries, 64-bit from there, same times."""

from __future__ import annotations

import numpy as np

from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.network import network_for
from tpusim.collectives.physical import PhysicalNetwork
from tpusim.collectives.plans import INDEX_LIMIT, index_type
from tpusim.hardware import load_hardware
from tpusim.topology import map_mesh, parse_topology
from tpusim.vocabulary import CollectiveOp

INDEX_COLUMNS = ("src", "dst", "route", "hops", "succ", "slot", "gate_in", "incoming")


def test_the_index_type_widens_exactly_at_the_limit() -> None:
    assert index_type(INDEX_LIMIT - 1, 3) is np.int32
    assert index_type(2, INDEX_LIMIT) is np.int64
    assert index_type() is np.int32
    assert np.iinfo(np.int32).max == INDEX_LIMIT - 1  # every index below the limit, and -1, fits


def test_plans_and_programs_of_a_torus_collective_hold_32_bit_indices() -> None:
    network = network_for(load_hardware("tpuv4"), map_mesh(parse_topology("torus:4x4x4"), 16, 4))
    assert isinstance(network, PhysicalNetwork)
    call = CollectiveCall(CollectiveOp.REDUCE_SCATTER, 0, 1 << 20)
    plans = network.plans(call, 0)
    assert plans and all(plan.src.dtype == np.int32 and plan.route.dtype == np.int32 for plan in plans)
    program = network.program(call, tuple(range(4)))
    assert {name: getattr(program, name).dtype for name in INDEX_COLUMNS} == dict.fromkeys(INDEX_COLUMNS, np.int32)
    assert program.nbytes.dtype == np.float64  # sizes keep their full precision
