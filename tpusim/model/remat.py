"""Rematerialisation policies minimal and custom: what a block's backward pass reads, finds saved or recomputes.

A block's forward ops produce named tensors and its backward ops read some of them (``block_graph``). A
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
from tpusim.vocabulary import QKV_PARTS, Activation, Attention, BlockKind, Recompute, check_remat

__all__ = ["ACTIVATION_DTYPE", "DERIVED", "MINIMAL_SAVED", "HostCopy", "RematPlan", "block_graph", "check_remat",
           "host_copies", "plan_remat", "reads_of", "tensor_widths"]

DERIVED = frozenset({Recompute.MINIMAL, Recompute.CUSTOM})
"""The policies whose recomputation this module derives from the forward op list."""

ACTIVATION_DTYPE = "bf16"  # activations are stored in bf16 (as Korthikanti et al.'s 2-byte accounting)

Graph = tuple[Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]], Mapping[str, tuple[str, ...]]]
"""(producers, reads): tensor -> (the forward ops producing it, the tensors they read), and backward op -> the
forward tensors it reads. The layer input ``x0`` has no producer."""


def block_graph(block: BlockKind = BlockKind.SEQUENTIAL, activation: str = "gelu") -> Graph:
    """The tensors of a block and who reads them in backward: weight gradients read their GeMM's input, LayerNorm
    and activation gradients their input, the attention core's gradient Q, K, V and its output (and unfused its
    probabilities). A parallel block has one LayerNorm whose output feeds both the QKV and FF1 GeMMs."""
    mlp_input = "n1" if block is BlockKind.PARALLEL else "n2"
    producers: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
        "n1": (("ln1.norm", "ln1.psum"), ("x0",)),
        "qkv": (("qkv.fwd",), ("n1",)),
        "ctx": (("attention",), ("qkv",)),
        "probabilities": (("attention",), ("qkv",)),  # the unfused core's softmax output: never saved here
        "o": (("out_proj.fwd",), ("ctx",)),
        "u": (("ff1.fwd",), (mlp_input,)),
        "g": ((activation,), ("u",)),
        "y": (("ff2.fwd",), ("g",)),
    }
    reads: dict[str, tuple[str, ...]] = {
        "ff2.bwd_weight": ("g",),
        f"{activation}.bwd": ("u",),
        "ff1.bwd_weight": (mlp_input,),
        "out_proj.bwd_weight": ("ctx",),
        "attention.bwd": ("qkv", "ctx"),
        "qkv.bwd_weight": ("n1",),
        "ln1.norm.bwd": ("x0",),
    }
    if block is BlockKind.SEQUENTIAL:
        producers["x1"] = (("residual1",), ("x0", "o"))
        producers["n2"] = (("ln2.norm", "ln2.psum"), ("x1",))
        reads["ln2.norm.bwd"] = ("x1",)
    return MappingProxyType(producers), MappingProxyType(reads)


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
               attention: Attention, forward_order: Sequence[str], *, block: BlockKind = BlockKind.SEQUENTIAL,
               activation: str = "gelu") -> RematPlan:
    """The recompute ops and stored tensors of ``minimal`` or ``custom`` for a block of kind ``block`` whose MLP
    nonlinearity is ``activation`` (see the module docstring)."""
    producers, reads = block_graph(block, activation)
    if recompute not in DERIVED:
        raise ValueError(f"recompute {recompute} keeps its published accounting; only minimal and custom derive")
    offloaded = _tensors(offload) if recompute is Recompute.CUSTOM else frozenset()
    saved = (_tensors(MINIMAL_SAVED) if recompute is Recompute.MINIMAL else _tensors(save)) | {"x0"}
    available = saved | offloaded
    needed = [tensor for read in reads.values() for tensor in read]
    if attention is Attention.UNFUSED:
        needed.append("probabilities")  # the unfused core's gradient reads the softmax output
    rerun: set[str] = set()
    used: set[str] = set()
    while needed:
        tensor = needed.pop()
        if tensor in available:
            used.add(tensor)
            continue
        ops, inputs = producers[tensor]
        if not rerun.issuperset(ops):
            rerun.update(ops)
            needed.extend(inputs)
    order = [name for name in forward_order if name in rerun]
    missing = rerun.difference(order)
    if missing:
        raise ValueError(f"forward ops {sorted(missing)} are not in the block's forward op list")
    return RematPlan(tuple(order), frozenset(used - offloaded), frozenset(used & offloaded))


def tensor_widths(qkv: int, hidden: int, context: int, ff1: int, ffn: int) -> Mapping[str, int]:
    """Features per token of each tensor: the QKV GeMM's outputs, the hidden size, the out-projection's inputs
    (the attention context), the FF1 GeMM's outputs (gate and up of a gated MLP) and the MLP width (the
    activation's output)."""
    return MappingProxyType({"x0": hidden, "n1": hidden, "qkv": qkv, "ctx": context, "probabilities": 0,
                             "o": hidden, "x1": hidden, "n2": hidden, "u": ff1, "g": ffn, "y": hidden})


def tensor_bytes(tensors: Iterable[str], tokens: float, widths: Mapping[str, int]) -> float:
    """Bytes of ``tensors`` for ``tokens`` tokens, in the activation dtype."""
    return float(sum(tokens * widths[tensor] for tensor in tensors) * dtype_bytes(ACTIVATION_DTYPE))


RECOMPUTE_PREFIX = "recompute."  # how ``model.layer`` names a forward op rerun in the backward pass


def reads_of(backward_op: str, graph: Graph | None = None) -> tuple[str, ...]:
    """The forward tensors a backward op reads in a block of ``graph`` (default: the sequential GeLU block): a
    gradient op's reads, a recompute op its forward op's inputs."""
    producers, reads = graph if graph is not None else block_graph()
    if backward_op.startswith(RECOMPUTE_PREFIX):
        rerun = backward_op.removeprefix(RECOMPUTE_PREFIX)
        inputs = [tensor for ops, inputs in producers.values() if rerun in ops for tensor in inputs]
        return tuple(dict.fromkeys(inputs))
    return reads.get(backward_op, ())


@dataclass(frozen=True)
class HostCopy:
    """One offloaded tensor of a block on one chip: written to the host in forward, read back in backward."""

    tensor: str
    nbytes: float  # per chip
    written_after: str | None  # the forward op whose end starts the copy out; None: the block's input, at its start
    read_by: str  # the first backward op that reads it: the copy back has ended before that op starts


def host_copies(plan: RematPlan, backward_order: Sequence[str], nbytes: Mapping[str, float],
                graph: Graph | None = None) -> tuple[HostCopy, ...]:
    """The copies of ``plan``'s offloaded tensors (``nbytes`` each, per chip), in the order the backward pass
    (``backward_order``, op names) of a block of ``graph`` (default: the sequential GeLU block) first reads them."""
    graph = graph if graph is not None else block_graph()
    producers = graph[0]
    first: dict[str, str] = {}
    for op in backward_order:
        for tensor in reads_of(op, graph):
            first.setdefault(tensor, op)
    copies = []
    for tensor in plan.offloaded:
        if tensor not in first:  # an offloaded tensor is kept only because a backward op reads it
            raise ValueError(f"offloaded tensor {tensor!r} is read by no backward op")
        writers = producers[tensor][0] if tensor in producers else ()
        copies.append(HostCopy(tensor, nbytes[tensor], writers[-1] if writers else None, first[tensor]))
    order = list(backward_order)
    return tuple(sorted(copies, key=lambda copy: (order.index(copy.read_by), copy.tensor)))
