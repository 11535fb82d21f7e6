"""One measured run as one training-step request: the single place where the table's columns become request fields.

The mapping (docs/validation.md#how-a-row-becomes-a-request): the generation's physical profile; an inline model
of the row's dimensions; the global batch; a named layout from the ICI and DCN degrees with Megatron 1D tensor
parallelism (``tp1d``) on the tensor axis; parameters replicated over data axes (ZeRO stage 0, as MaxText does);
recomputation, attention kernel and matmul precision from the row's policies; embedding and optimizer included,
as every real run has them. A slice of a chip count the generation has no default slice for is its most cube-like
slice of whole cubes (PaLM's 3072-chip pods: 12x16x16), which the sources do not state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tpusim.errors import UserError
from tpusim.experiments.measurements.table import CUSTOM_REMAT, NEAR_FULL, MeasuredRun
from tpusim.hardware.profiles import load_hardware
from tpusim.topology.slices import TPUV4_RULES, slice_shape_for

__all__ = ["LAYOUT_AXES", "RowRequest", "row_request"]

LAYOUT_AXES = ("data", "dcn_data", "dcn_fsdp", "fsdp", "tensor")
"""The axes of a named layout in the order the layout names them; an axis of degree 1 is left out."""

_PARALLEL_BLOCK = re.compile(r"\bparallel (?:block|attn)")
"""How other_flags says attention and MLP run in parallel ("parallel block", "parallel attn+MLP block"); a bare
"parallel" also appears in compiler flags (DATA_PARALLEL_OVERLAP)."""
_ACTIVATIONS = ("relu", "gelu")


@dataclass(frozen=True)
class RowRequest:
    """The step request fields of one measured run, and the notes on what the mapping approximates."""

    fields: dict[str, Any]
    notes: tuple[str, ...] = ()


def row_request(run: MeasuredRun) -> RowRequest:
    """The step request that simulates ``run`` (raises ``UserError`` where the row cannot be expressed)."""
    recompute, recompute_notes = _recompute(run)
    fields: dict[str, Any] = {
        "kind": "step",
        "hardware": run.tpu.hardware,
        "model": _model(run),
        "batch": run.global_batch_sequences,
        "layout": layout_of(run),
        "algorithm": "tp1d",
        **recompute,
        "attention": _attention(run.attention),
        "precision": run.matmul_dtype.split(" ", 1)[0],
        "embedding": True,
        "optimizer": True,
        "fidelity": "auto",
    }
    topology = _topology(run)
    if topology is not None:
        fields["topology"] = topology
    if run.ici_data > 1:  # MaxText replicates parameters and optimizer state over its data axes (a dcn_data axis
        fields["zero_stage"] = 0  # beside fsdp replicates them by the layout's own rule, docs/workloads.md#layouts
    return RowRequest(fields, recompute_notes)


def layout_of(run: MeasuredRun) -> str:
    """The named layout of the row's degrees, e.g. "fsdp=16,tensor=8" or "dcn_data=2,fsdp=256,tensor=12"."""
    degrees = {"data": run.ici_data, "dcn_data": run.dcn_data, "dcn_fsdp": run.dcn_fsdp, "fsdp": run.ici_fsdp,
               "tensor": run.ici_tensor}
    named = [f"{axis}={degrees[axis]}" for axis in LAYOUT_AXES if degrees[axis] > 1]
    return ",".join(named) or "data=1"  # one chip: a layout still names an axis


def _topology(run: MeasuredRun) -> str | None:
    """None where the generation has a default slice of the row's chips per slice, else its most cube-like one."""
    rules = load_hardware(run.tpu.hardware).slice_rules or TPUV4_RULES
    if run.chips_per_slice in dict(rules.defaults):
        return None
    shape = slice_shape_for(run.chips_per_slice, rules)
    if shape is None:
        raise UserError(f"row {run.id!r}: no {run.tpu.hardware} slice of {run.chips_per_slice} chips "
                        f"(chips_per_slice); valid: {', '.join(str(n) for n, _ in rules.defaults)} or a number of "
                        "whole cubes")
    return shape


def _model(run: MeasuredRun) -> dict[str, Any]:
    return {"name": run.id, "description": f"measured run {run.id} ({run.source_repo}, {run.source_path})",
            "layers": run.layers, "hidden": run.emb_dim, "heads": run.q_heads, "kv_heads": run.kv_heads,
            "head_dim": run.head_dim, "ffn": run.mlp_dim,
            "mlp": {"kind": "gated" if run.mlp_gated else "plain", "activation": _activation(run)},
            "block": "parallel" if _PARALLEL_BLOCK.search(run.other_flags.lower()) else "sequential",
            "tied_embeddings": run.tied_embeddings, "vocabulary": run.vocab, "sequence": run.seq_len}


def _activation(run: MeasuredRun) -> str:
    """SiLU for a gated MLP (SwiGLU); for a plain one, the activation other_flags names."""
    if run.mlp_gated:
        return "silu"
    named = [name for name in _ACTIVATIONS if re.search(rf"\b{name}\b", run.other_flags.lower())]
    if len(named) != 1:
        raise UserError(f"row {run.id!r}: other_flags names {'no' if not named else 'more than one'} activation of "
                        f"its plain MLP; valid: one of {', '.join(_ACTIVATIONS)}")
    return named[0]


def _recompute(run: MeasuredRun) -> tuple[dict[str, Any], tuple[str, ...]]:
    policy = run.remat_policy
    custom = CUSTOM_REMAT.fullmatch(policy)
    if custom is not None:
        names = [name.strip() for name in custom.group("names").split(",")]
        return {"recompute": "custom", "remat_offload": names}, ()
    if policy.endswith(NEAR_FULL):
        return {"recompute": "full"}, (f"remat policy {policy!r} simulated as recompute full",)
    return {"recompute": policy}, ()  # full or minimal: the table's reader admits no other


def _attention(text: str) -> str:
    if text.startswith("dot_product"):
        return "unfused"  # plain XLA attention: scores through HBM
    if text.startswith("flash_noncausal"):
        return "fused"
    return "fused-causal"  # flash(causal...): the reader admits no other kernel
