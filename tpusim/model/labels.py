"""The names a training step's ops carry in traces: layer, pass and op, e.g. ``L2 fwd ff1``, ``L2 bwd-data ff2``.

A block's ops are ``L<layer> <pass> <op>``: the pass is ``fwd``, ``recompute`` (the forward ops the backward pass
runs again under activation recomputation), ``bwd-data`` and ``bwd-weight`` (a GeMM's two backward GeMMs) or
``bwd`` (the backward of local work and LayerNorm statistics). The op is the FF layer (``qkv``, ``out_proj``,
``ff1``, ``ff2``) or the local op (``attention``, ``ln1.norm``, ``ln1.psum``, ``gelu``, ``residual1``...). Ops that
run once per step (embedding, LM head, loss, optimizer update) are ``step <op name>``. Layers count from 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from tpusim.model.data_parallel import DataSyncOp, DataWaitOp
from tpusim.model.layer import RECOMPUTE_PREFIX, GemmOp, LocalOp, NormStatsOp, Pass
from tpusim.model.op_kinds import OpKind

__all__ = ["op_label"]

_BACKWARD = ".bwd"
_GEMM_PASSES: Mapping[Pass, str] = MappingProxyType(
    {Pass.FORWARD: "fwd", Pass.BACKWARD_DATA: "bwd-data", Pass.BACKWARD_WEIGHT: "bwd-weight"})


def op_label(op: OpKind, layer: int) -> str:
    """The trace name of ``op`` run for block ``layer`` (-1: once per step)."""
    if layer < 0:
        return f"step {op.name}"
    step, name = op.accept(_LABELS)
    return f"L{layer} {step} {name}"


class _Labels:
    """(pass, name) of each op kind in its trace label (``op_kinds.OpVisitor``): a GeMM is named by its layer and
    pass, any other op by its own name, marked as recomputed or backward by it."""

    def gemm(self, op: GemmOp) -> tuple[str, str]:
        recompute = op.layer.startswith(RECOMPUTE_PREFIX)
        name = op.layer.removeprefix(RECOMPUTE_PREFIX)
        return ("recompute" if recompute and op.which is Pass.FORWARD else _GEMM_PASSES[op.which]), name

    def local(self, op: LocalOp) -> tuple[str, str]:
        return _named(op.name)

    def norm_stats(self, op: NormStatsOp) -> tuple[str, str]:
        return _named(op.name)

    def data_sync(self, op: DataSyncOp) -> tuple[str, str]:
        return _named(op.name)

    def data_wait(self, op: DataWaitOp) -> tuple[str, str]:
        return _named(op.name)


_LABELS = _Labels()  # holds nothing: one serves every label


def _named(name: str) -> tuple[str, str]:
    if name.startswith(RECOMPUTE_PREFIX):
        return "recompute", name.removeprefix(RECOMPUTE_PREFIX)
    if name.endswith(_BACKWARD):
        return "bwd", name.removesuffix(_BACKWARD)
    return "fwd", name
