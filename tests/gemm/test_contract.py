"""The contract every registered algorithm passes, the built-ins and the plug-ins of ``$TPUSIM_PLUGINS`` alike.

For every dataflow, both layouts (plain and transposed) and five mesh shapes (square, tall, wide, 1xn, nx1), the
algorithm's program run on numpy blocks assembles exactly ``X @ W`` of the dataflow, on both kinds of network: the
calibrated one (``meshslice-tpu-fit``: every axis an abstract ring, the network on which every closed form of
docs/algorithms.md is exact) and the physical one (``tpuv4`` on a torus of the mesh's own shape, whose plans move
the payloads over real links). On the calibrated network the simulated time must equal the algorithm's closed form
wherever it claims one (on the physical torus a closed form may be an upper bound: docs/algorithms.md#summa). A
combination is left out only where the algorithm's own feasibility rule refuses it, and then the refusal must be
one clean line and the simulation must refuse it the same way.

Every algorithm's declaration of the panels a chip holds while it runs (``GemmAlgorithm.panel_elements``) is checked
against what its program receives on the same numpy-payload run: at least the largest single buffer any chip
receives (an all-gather's, broadcast's or shift's result over more than one chip), at most everything a chip
receives; and the early transfers' declaration (``early_elements``) against what ``early_transfers`` sends.

``TPUSIM_PLUGINS=my_alg python -m pytest tests/gemm/test_contract.py -k my-alg`` (``tests/plugins`` on the path)
runs the contract on a plug-in; tests/gemm/test_plugin_contract.py proves it fails for a wrong product.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
import simpy

from tpusim.collectives.device import Device
from tpusim.collectives.factory import network_for
from tpusim.engine.tensor import Tensor
from tpusim.errors import UserError
from tpusim.gemm.algorithm import GemmContext
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import algorithms, get_algorithm
from tpusim.gemm.sharding import operand_blocks
from tpusim.gemm.simulate import check_gemm, simulate_gemm
from tpusim.vocabulary import CollectiveOp, Dataflow

MESHES = {"square": (2, 2), "tall": (4, 2), "wide": (2, 4), "1xn": (1, 4), "nx1": (4, 1)}
DIMS = (64, 128, 192)
"""M, N, K: small, distinct, and divisible by what MeshSlice needs for two slices on every mesh here
(lcm(R, C) x 8 x 2)."""
NETWORKS = {"calibrated": "meshslice-tpu-fit", "physical": "tpuv4"}
RECEIVING = frozenset({CollectiveOp.ALL_GATHER, CollectiveOp.BROADCAST, CollectiveOp.SHIFT, CollectiveOp.SEND_RECV})
"""The collectives whose result is a buffer received from other chips; a reduction's lands in the chip's own output."""
EXACT = 1e-9
"""Largest absolute error of an exact schedule: float64 sums of at most K products of standard normals."""


def _params(name: str, problem: GemmProblem, mesh: tuple[int, int]) -> GemmParams:
    """Default parameters; a slicing algorithm takes two slices where it can, else its smallest feasible count."""
    algorithm = get_algorithm(name)
    if not algorithm.uses_slices:
        return GemmParams()
    options = algorithm.slice_options(problem, mesh, GemmParams(slices=1)) or [1]
    return GemmParams(slices=2 if 2 in options else options[0])


@pytest.mark.parametrize("network", sorted(NETWORKS))
@pytest.mark.parametrize("mesh", sorted(MESHES))
@pytest.mark.parametrize("transpose", [False, True], ids=["plain", "transposed"])
@pytest.mark.parametrize("dataflow", list(Dataflow), ids=str)
@pytest.mark.parametrize("name", sorted(algorithms()))
def test_the_algorithm_computes_the_product_and_equals_its_closed_form(
        profile_mesh, monkeypatch: pytest.MonkeyPatch, name: str, dataflow: Dataflow, transpose: bool, mesh: str,
        network: str) -> None:
    shape = MESHES[mesh]
    hardware, mapping = profile_mesh(NETWORKS[network], *shape)
    problem = GemmProblem(*DIMS, dataflow, transpose)
    params = _params(name, problem, shape)
    try:
        check_gemm(get_algorithm(name), problem, shape, params)
    except UserError as refusal:  # the algorithm's own rule: a clean line, and the simulation says the same
        assert refusal.message and "\n" not in refusal.message
        with pytest.raises(type(refusal)) as simulated:
            simulate_gemm(problem, get_algorithm(name), params, network_for(hardware, mapping), verify=True)
        assert simulated.value.message == refusal.message
        pytest.skip(f"refused by {name}: {refusal.message}")
    received, devices = _recording(monkeypatch)
    result = simulate_gemm(problem, get_algorithm(name), params, network_for(hardware, mapping), verify=True)
    assert result.max_abs_error is not None and result.max_abs_error < EXACT
    _check_panels(name, problem, params, shape, received, devices)
    if network == "calibrated":  # every collective there has a closed form, so every algorithm's twin exists
        assert result.analytic_time_s is not None
        assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9, abs=0.0)


def _recording(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[int, list[int]], list[Device]]:
    """Every buffer each chip receives (bytes, by chip id) from now on, and the devices that ran."""
    received: dict[int, list[int]] = defaultdict(list)
    devices: list[Device] = []
    submit = Device._collective

    def recorded(dev: Device, op: CollectiveOp, tensor: Tensor, axis: int, **fields: Any) -> simpy.Event:
        event = submit(dev, op, tensor, axis, **fields)
        if dev not in devices:
            devices.append(dev)
        if op in RECEIVING and dev.size(axis) > 1 and event.callbacks is not None:  # one chip receives nothing
            event.callbacks.append(lambda done: received[dev.chip_id].append(done.value.nbytes)
                                   if isinstance(done.value, Tensor) else None)
        return event

    monkeypatch.setattr(Device, "_collective", recorded)
    return received, devices


def _check_panels(name: str, problem: GemmProblem, params: GemmParams, mesh: tuple[int, int],
                  received: dict[int, list[int]], devices: list[Device]) -> None:
    algorithm = get_algorithm(name)
    ctx = GemmContext(problem, params, mesh)
    declared = algorithm.panel_bytes(ctx)
    largest = max((max(sizes) for sizes in received.values()), default=0)
    everything = max((sum(sizes) for sizes in received.values()), default=0)
    assert largest <= declared <= everything, (largest, declared, everything)
    blocks = operand_blocks(problem.x_shape, problem.w_shape, algorithm.sharding(problem, mesh), mesh)
    for dev in devices[:1]:  # any chip: the sizes of the early transfers do not depend on its position
        early = algorithm.early_transfers(dev, ctx, *(Tensor(blocks[o], problem.dtype) for o in ("x", "w")))
        sent = sum(transfer.received_bytes(tensor.nbytes, dev.size(transfer.axis)) for transfer, tensor in early
                   if dev.size(transfer.axis) > 1)
        assert algorithm.early_bytes(ctx) == sent


def test_every_builtin_is_under_contract() -> None:
    """The parametrisation reads the registry: the seven built-ins are all in it."""
    assert {"cannon", "collective", "fsdp", "meshslice", "summa", "tp1d", "wang"} <= set(algorithms())
