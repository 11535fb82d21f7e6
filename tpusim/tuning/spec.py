"""What a tuning search is asked (``TuneSpec``: the tune request with what it names resolved) and what it settles
from that before it enumerates a mesh (``Setting``): one slice's share of the chips and batch over DCN, the memory
plan, the data degrees and the slice shapes searched."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

from pydantic import PrivateAttr, model_validator

from tpusim.collectives.network import Network
from tpusim.config import HardwareProfile, TransformerModel
from tpusim.config.requests import EVERY_ZERO_STAGE, TuneRequest
from tpusim.errors import UserError
from tpusim.gemm.algorithm import GemmAlgorithm
from tpusim.model.memory import MemoryPlan
from tpusim.vocabulary import Activation, Prefetch, Recompute

REFINE_MESHES = 3
TUNED_DTYPE = "bf16"
"""The element type of every GeMM a search times (``precision`` int8 changes the rate, not the operands)."""


class TuneSpec(TuneRequest):
    """A tune request as the search reads it: the options are the request's own fields (declared once, in
    ``tpusim.config.requests``); ``model`` and ``hardware`` are the loaded objects, the profile scaled and switched
    as asked, ``zero_stage`` is one stage (the runner tunes each stage of ``any`` in turn), and the algorithm named
    is resolved once, by the runner (``tune_spec``), into ``gemm_algorithm``."""

    _algorithm: GemmAlgorithm | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _resolved(self) -> Self:
        if not isinstance(self.model, TransformerModel) or not isinstance(self.hardware, HardwareProfile):
            raise UserError("a TuneSpec takes the loaded model and hardware profile, not their names "
                            "(tpusim.api.tune and the runner resolve a request's names)")
        if self.zero_stage == EVERY_ZERO_STAGE:
            raise UserError("a TuneSpec searches one ZeRO stage; the runner tunes each stage of 'any' in turn")
        return self

    @property
    def gemm_algorithm(self) -> GemmAlgorithm:
        """The algorithm tuned, as resolved from its name (``tune_spec``)."""
        if self._algorithm is None:
            raise UserError(f"a TuneSpec has its algorithm {self.algorithm!r} resolved by tune_spec")
        return self._algorithm

    @property
    def transformer(self) -> TransformerModel:
        """The model tuned for."""
        assert isinstance(self.model, TransformerModel)  # _resolved
        return self.model

    @property
    def profile(self) -> HardwareProfile:
        """The hardware tuned on, as scaled and switched by the request."""
        assert isinstance(self.hardware, HardwareProfile)  # _resolved
        return self.hardware

    @property
    def stage(self) -> int:
        """The ZeRO stage of layouts with D > 1 replicas."""
        assert isinstance(self.zero_stage, int)  # _resolved
        return self.zero_stage

    @property
    def dcn_slices(self) -> int:
        """Slices over DCN (a dcn_data axis): ``chips`` and ``batch`` are those of every slice."""
        return self.dcn_data

    @property
    def remat(self) -> tuple[frozenset[Activation], frozenset[Activation]]:
        """The activations saved in HBM and those offloaded to host memory, under recompute custom."""
        return frozenset(self.remat_save), frozenset(self.remat_offload)


def tune_spec(request: TuneRequest, model: TransformerModel, hardware: HardwareProfile,
              algorithm: GemmAlgorithm) -> TuneSpec:
    """``request`` with its model, hardware and algorithm resolved (the one way to make a ``TuneSpec``)."""
    fields = {name: getattr(request, name) for name in TuneRequest.model_fields}
    spec = TuneSpec.model_validate({**fields, "kind": "tune", "model": model, "hardware": hardware,
                                    "algorithm": algorithm.name})
    spec._algorithm = algorithm
    return spec


@dataclass(frozen=True)
class Setting:
    """What one search settles from its request before it enumerates a mesh."""

    request: TuneSpec  # recompute and micro-batches as ``plan_memory`` chose them
    algorithm: GemmAlgorithm
    whole_batch: int  # every slice's sequences together
    chips: int  # one slice's chips over DCN: the search is one slice's, every slice runs the same layout
    batch: int  # one slice's sequences
    prefetch: Prefetch
    budget: float | None  # bytes of the window policy's prefetch budget
    memory: MemoryPlan  # the first choice, that of the smallest data-parallel degree (replicas repeat model state)
    open_choice: bool  # the request left recomputation or the micro-batch count to the memory plan
    # the next choice past those given (``plan_memory``'s ``past``); InfeasibleError once none is left
    fit: Callable[[frozenset[tuple[Recompute, int]]], MemoryPlan]
    dp: int | None  # the data-parallel degree searched; None: every one the chips and batch allow
    shapes: list[str | None]  # the slice shapes searched (``shapes``)
    network: Network  # the request's model (its profile on the search's context); candidates derive theirs

    @property
    def micro(self) -> int:
        """Sequences of one slice's micro-batch under the first memory choice."""
        return self.micro_of(self.memory)

    def micro_of(self, memory: MemoryPlan) -> int:
        """Sequences of one slice's micro-batch under ``memory``: the search prices one; whole steps are timed at m
        of them."""
        return self.batch // memory.microbatches
