"""What a tuning search is asked (``TuneSpec``) and what it settles from that before it enumerates a mesh
(``Setting``): one slice's share of the chips and batch over DCN, the memory plan, the data degrees and the slice
shapes searched."""

from __future__ import annotations

from dataclasses import dataclass

from tpusim.collectives.network import Network
from tpusim.config import HardwareProfile, TransformerModel
from tpusim.gemm.algorithm import GemmAlgorithm
from tpusim.model.memory import MemoryPlan
from tpusim.vocabulary import Activation, Attention, Dataflow, Fidelity, Prefetch, Recompute

REFINE_MESHES = 3


@dataclass(frozen=True)
class TuneSpec:
    """What to tune for; ``batch`` defaults to the chip count, ``prefetch`` to the profile's default."""

    model: TransformerModel
    hardware: HardwareProfile
    chips: int
    algorithm: str = "meshslice"
    batch: int | None = None
    topology: str | None = None
    prefetch: Prefetch | None = None
    recompute: Recompute = Recompute.AUTO
    remat_save: frozenset[Activation] = frozenset()  # under recompute custom (model.remat)
    remat_offload: frozenset[Activation] = frozenset()
    attention: Attention = Attention.UNFUSED
    prefetch_window: int = 1
    prefetch_budget: int | str | None = None
    microbatches: int | None = None  # None: 1, or the fewest that fit (``model.memory.plan_memory``)
    fidelity: Fidelity = Fidelity.AUTO
    exhaustive: bool = False
    ignore_memory: bool = False
    allow_infeasible: bool = False
    refine_meshes: int = REFINE_MESHES
    dataflows: tuple[Dataflow, ...] = tuple(Dataflow)  # the per-layer dataflows to choose from
    dtype: str = "bf16"
    bytes_per_param: float = 16.0
    dp: int | None = None  # the data-parallel degree D; None: every D the chips, batch and topology allow
    zero_stage: int = 1  # how layouts with D > 1 shard the model state (model.data_parallel)
    dcn_slices: int = 1  # slices over DCN (a dcn_data axis): ``chips`` and ``batch`` are those of every slice


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
    memory: MemoryPlan  # that of the smallest data-parallel degree (replicas repeat model state)
    open_choice: bool  # the request left recomputation or the micro-batch count to the memory plan
    dp: int | None  # the data-parallel degree searched; None: every one the chips and batch allow
    shapes: list[str | None]  # the slice shapes searched (``shapes``)
    network: Network  # the request's model (its profile on the search's context); candidates derive theirs

    @property
    def micro(self) -> int:
        """Sequences of one slice's micro-batch: the search prices one; whole steps are timed at m of them."""
        return self.batch // self.memory.microbatches
