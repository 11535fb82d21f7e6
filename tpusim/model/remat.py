"""Rematerialisation policies minimal and custom: what a block's backward pass reads, finds saved or recomputes.

A block's forward ops produce named tensors (``PRODUCERS``); its backward ops read some of them (``READS``). A
policy saves some tensors (the layer input always: it is the checkpoint's own input and cannot be recomputed);
every tensor the backward reads that is not saved is recomputed by rerunning the forward ops that produce it, and
their inputs in turn, until everything traces back to saved tensors. The recompute ops are therefore taken from
the forward op list itself, renamed ``recompute.``, and a saved tensor that neither the backward nor a recompute op
reads is not kept (JAX keeps only the residuals the backward uses). ``minimal`` saves the outputs of the four
projection GeMMs (MaxText's "minimal": ``checkpoint_dots_with_no_batch_dims``, the dots with weights, not the
attention core's batched products); ``custom`` saves the activations ``remat_save`` names and writes those
``remat_offload`` names to host memory (``host_copies`` says when each copy leaves and when it must be back).
``none``, ``selective`` and ``full`` keep their published accounting in
``model.memory`` and ``model.layer`` (docs/workloads.md#memory).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from tpusim.units import dtype_bytes
from tpusim.vocabulary import QKV_PARTS, Activation, Attention, Recompute, check_remat

__all__ = ["ACTIVATION_DTYPE", "DERIVED", "MINIMAL_SAVED", "PRODUCERS", "READS", "HostCopy", "RematPlan",
           "check_remat", "host_copies", "plan_remat", "reads_of", "tensor_widths"]

DERIVED = frozenset({Recompute.MINIMAL, Recompute.CUSTOM})
"""The policies whose recomputation this module derives from the forward op list."""

ACTIVATION_DTYPE = "bf16"  # activations are stored in bf16 (as Korthikanti et al.'s 2-byte accounting)

# tensor -> (the forward ops producing it, the tensors they read). The layer input ``x0`` has no producer.
PRODUCERS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = MappingProxyType({
    "n1": (("ln1.norm", "ln1.psum"), ("x0",)),
    "qkv": (("qkv.fwd",), ("n1",)),
    "ctx": (("attention",), ("qkv",)),
    "probabilities": (("attention",), ("qkv",)),  # the unfused core's softmax output: never saved by these policies
    "o": (("out_proj.fwd",), ("ctx",)),
    "x1": (("residual1",), ("x0", "o")),
    "n2": (("ln2.norm", "ln2.psum"), ("x1",)),
    "u": (("ff1.fwd",), ("n2",)),
    "g": (("gelu",), ("u",)),
    "y": (("ff2.fwd",), ("g",)),
})

# backward op -> the forward tensors it reads (weight gradients read their GeMM's input; LayerNorm and GeLU
# gradients their input; the attention core's gradient Q, K, V and its output, and unfused its probabilities)
READS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "ff2.bwd_weight": ("g",),
    "gelu.bwd": ("u",),
    "ff1.bwd_weight": ("n2",),
    "ln2.norm.bwd": ("x1",),
    "out_proj.bwd_weight": ("ctx",),
    "attention.bwd": ("qkv", "ctx"),
    "qkv.bwd_weight": ("n1",),
    "ln1.norm.bwd": ("x0",),
})

_NAMED: Mapping[Activation, str] = MappingProxyType({
    Activation.DECODER_LAYER_INPUT: "x0",
    Activation.QKV_PROJ: "qkv",
    Activation.CONTEXT: "ctx",
    Activation.OUT_PROJ: "o",
    Activation.MLPWI: "u",
    Activation.MLPWO: "y",
})

MINIMAL_SAVED = frozenset({Activation.QKV_PROJ, Activation.OUT_PROJ, Activation.MLPWI, Activation.MLPWO})
"""What ``minimal`` saves: the outputs of the four projection GeMMs."""


def _tensors(names: Iterable[Activation]) -> frozenset[str]:
    names = set(names)
    if names >= QKV_PARTS:
        names = (names - QKV_PARTS) | {Activation.QKV_PROJ}
    return frozenset(_NAMED[name] for name in names if name in _NAMED)


@dataclass(frozen=True)
class RematPlan:
    """A policy's outcome for one block: the forward ops rerun in backward, and the tensors kept in HBM and on
    the host."""

    recomputed: tuple[str, ...]  # forward op names, in forward order
    kept: frozenset[str]  # tensors stored in HBM
    offloaded: frozenset[str]  # tensors written to host memory in forward, read back before backward


def plan_remat(recompute: Recompute, save: Iterable[Activation], offload: Iterable[Activation],
               attention: Attention, forward_order: Sequence[str]) -> RematPlan:
    """The recompute ops and stored tensors of ``minimal`` or ``custom`` (see the module docstring)."""
    if recompute not in DERIVED:
        raise ValueError(f"recompute {recompute} keeps its published accounting; only minimal and custom derive")
    offloaded = _tensors(offload) if recompute is Recompute.CUSTOM else frozenset()
    saved = (_tensors(MINIMAL_SAVED) if recompute is Recompute.MINIMAL else _tensors(save)) | {"x0"}
    available = saved | offloaded
    needed = [tensor for reads in READS.values() for tensor in reads]
    if attention is Attention.UNFUSED:
        needed.append("probabilities")  # the unfused core's gradient reads the softmax output
    rerun: set[str] = set()
    used: set[str] = set()
    while needed:
        tensor = needed.pop()
        if tensor in available:
            used.add(tensor)
            continue
        ops, inputs = PRODUCERS[tensor]
        if not rerun.issuperset(ops):
            rerun.update(ops)
            needed.extend(inputs)
    order = [name for name in forward_order if name in rerun]
    missing = rerun.difference(order)
    if missing:
        raise ValueError(f"forward ops {sorted(missing)} are not in the block's forward op list")
    return RematPlan(tuple(order), frozenset(used - offloaded), frozenset(used & offloaded))


def tensor_widths(qkv: int, hidden: int, context: int, ffn: int) -> Mapping[str, int]:
    """Features per token of each tensor: the QKV GeMM's outputs, the hidden size, the out-projection's inputs
    (the attention context) and the FF1 outputs."""
    return MappingProxyType({"x0": hidden, "n1": hidden, "qkv": qkv, "ctx": context, "probabilities": 0,
                             "o": hidden, "x1": hidden, "n2": hidden, "u": ffn, "g": ffn, "y": hidden})


def tensor_bytes(tensors: Iterable[str], tokens: float, widths: Mapping[str, int]) -> float:
    """Bytes of ``tensors`` for ``tokens`` tokens, in the activation dtype."""
    return float(sum(tokens * widths[tensor] for tensor in tensors) * dtype_bytes(ACTIVATION_DTYPE))


RECOMPUTE_PREFIX = "recompute."  # how ``model.layer`` names a forward op rerun in the backward pass


def reads_of(backward_op: str) -> tuple[str, ...]:
    """The forward tensors a backward op reads: a gradient op's ``READS``, a recompute op its forward op's inputs."""
    if backward_op.startswith(RECOMPUTE_PREFIX):
        rerun = backward_op.removeprefix(RECOMPUTE_PREFIX)
        inputs = [tensor for ops, reads in PRODUCERS.values() if rerun in ops for tensor in reads]
        return tuple(dict.fromkeys(inputs))
    return READS.get(backward_op, ())


@dataclass(frozen=True)
class HostCopy:
    """One offloaded tensor of a block on one chip: written to the host in forward, read back in backward."""

    tensor: str
    nbytes: float  # per chip
    written_after: str | None  # the forward op whose end starts the copy out; None: the block's input, at its start
    read_by: str  # the first backward op that reads it: the copy back has ended before that op starts


def host_copies(plan: RematPlan, backward_order: Sequence[str], nbytes: Mapping[str, float]) -> tuple[HostCopy, ...]:
    """The copies of ``plan``'s offloaded tensors (``nbytes`` each, per chip), in the order the backward pass
    (``backward_order``, op names) first reads them."""
    first: dict[str, str] = {}
    for op in backward_order:
        for tensor in reads_of(op):
            first.setdefault(tensor, op)
    copies = []
    for tensor in plan.offloaded:
        if tensor not in first:  # an offloaded tensor is kept only because a backward op reads it
            raise ValueError(f"offloaded tensor {tensor!r} is read by no backward op")
        writers = PRODUCERS[tensor][0] if tensor in PRODUCERS else ()
        copies.append(HostCopy(tensor, nbytes[tensor], writers[-1] if writers else None, first[tensor]))
    order = list(backward_order)
    return tuple(sorted(copies, key=lambda copy: (order.index(copy.read_by), copy.tensor)))
