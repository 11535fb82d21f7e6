"""Models of a transformer model file (``tpusim/data/models/*.yaml``): the dimensions that generate the workload."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, model_validator

from tpusim.config.loader import FrozenModel

Count = Annotated[int, Field(ge=1)]


class TransformerModel(FrozenModel):
    """A decoder-only transformer as the step model sees it (docs/workloads.md#models)."""

    name: str = Field(min_length=1)
    description: str
    layers: Count
    hidden: Count
    heads: Count
    head_dim: Count
    ffn: Count
    """Width of the feed-forward layer (4 x hidden for both paper models)."""
    sequence: Count
    vocabulary: Count = 51200
    """Used only by the optional embedding / LM-head add-on."""

    @model_validator(mode="after")
    def _heads_cover_hidden(self) -> Self:
        if self.heads * self.head_dim != self.hidden:
            raise ValueError(
                f"heads x head_dim = {self.heads} x {self.head_dim} = {self.heads * self.head_dim} "
                f"must equal hidden = {self.hidden}"
            )
        return self

    @property
    def params_per_layer(self) -> int:
        """Weights of one block: QKV (3h^2) + out-projection (h^2) + FF1 and FF2 (2 h ffn)."""
        return 4 * self.hidden * self.hidden + 2 * self.hidden * self.ffn
