"""The local product each dataflow computes on a chip, and its dimensions, read from the role table."""

from __future__ import annotations

import simpy

from tpusim.collectives.device import Device
from tpusim.engine.tensor import Tensor
from tpusim.vocabulary import Dataflow


def local_product(
    dev: Device,
    dataflow: Dataflow,
    x: Tensor | simpy.Event,
    w: Tensor | simpy.Event,
    acc: Tensor | simpy.Event | None = None,
    *,
    accumulate: bool = False,
    name: str = "gemm",
) -> simpy.Event:
    """OS: X W; LS: X W^T; RS: X^T W, on whatever (partial or gathered) operands the chip holds; ``accumulate``
    as in ``Device.matmul``."""
    return dev.matmul(x, w, acc, trans_a=dataflow is Dataflow.RS, trans_b=dataflow is Dataflow.LS,
                      accumulate=accumulate, name=name)


def product_dims(dataflow: Dataflow, x_shape: tuple[int, int], w_shape: tuple[int, int]) -> tuple[int, int, int]:
    """(m, n, k) of the local product of operands with these stored shapes."""
    if dataflow is Dataflow.OS:
        return x_shape[0], w_shape[1], x_shape[1]
    if dataflow is Dataflow.LS:
        return x_shape[0], w_shape[0], x_shape[1]
    return x_shape[1], w_shape[1], x_shape[0]
