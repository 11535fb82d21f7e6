"""What a tuning run reports: the chosen configuration, the runner-up, and how much was priced how."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpusim.tuning.candidates import Candidate


@dataclass
class Choice:
    """One complete configuration, timed by ``simulate_step``.

    ``estimate_step_s`` is what the search predicted for it (layers x the per-layer sum of its op prices);
    ``step_time_s`` is the simulated step, the number the choice is judged by.
    """

    mesh: str  # "RxC", or "DxRxC" for D data-parallel replicas (of one slice)
    slice_shape: str | None  # the slice the mesh is placed on, e.g. "4x4x16"; None on a calibrated profile
    layout: str  # the named layout, e.g. "fsdp=64,tensor=4x1" or "dcn_data=2,data=8,tensor=16x2"
    algorithm: str
    dataflows: list[str]
    transposes: list[bool]
    slices: list[int | None]
    step_time_s: float
    estimate_step_s: float
    fidelity: str
    mfu: float
    hfu: float
    tokens_per_s: float
    seconds_per_sequence: float
    compute_s: float
    exposed_comm_s: float
    exposed_data_comm_s: float
    data_parallel: int
    memory_bytes_per_chip: float
    memory_feasible: bool
    feasible: bool
    microbatches: int  # the micro-batches the batch is split into (the fewest that fit, where the request left it)
    recompute: str  # the recomputation it runs with (the least that fits, where the request left it open)
    violations: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MeshReport:
    """How the search treated one factorisation R x C of the chip count.

    ``status``: "skipped" (infeasible, unmappable or no feasible layer option; see ``reason``), "priced"
    (ranked by the analytic twins only) or "simulated" (its candidates priced by the DES).
    ``analytic_step_s``: the closed-form estimate of its best plan; ``estimate_step_s``: that of its best plan from
    DES prices (per-layer ops plus the closed-form data-parallel tail); ``simulated_step_s``: its fastest plan
    simulated as a whole step (None when none was: a plan whose ops alone reach the best step cannot win).
    ``slice_shape``: the slice the mesh is placed on (every legal one is searched unless the topology is given;
    None on a calibrated profile); one factorisation on two shapes is two reports.
    """

    mesh: str
    status: str
    reason: str | None = None
    analytic_step_s: float | None = None
    simulated_step_s: float | None = None
    estimate_step_s: float | None = None
    slice_shape: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TuneResult:
    """The tuner's answer (field meanings: the module docstrings of ``tpusim.tuning``).

    ``evaluated``: distinct candidates (mesh, FF layer, dataflow, transposition, K) priced by any method;
    ``simulated``: those priced by the DES; ``steps_simulated``: whole steps run by ``simulate_step``;
    ``search_space``: complete configurations (mesh and one option per FF layer) that the DP covered.
    ``candidates``: rows of ``tuning.candidates.Candidate`` (the planning table of what was timed).
    """

    model: str
    hardware: str
    algorithm: str
    chips: int
    batch: int
    microbatches: int
    prefetch: str
    recompute: str
    attention: str
    fidelity: str
    zero_stage: int
    dcn_data: int  # slices over DCN; chips and batch are those of every slice, meshes one slice's
    exhaustive: bool
    best: Choice
    runner_up: Choice | None
    evaluated: int
    simulated: int
    steps_simulated: int
    search_space: int
    meshes: list[MeshReport]
    ignore_memory: bool
    notes: list[str] = field(default_factory=list)
    # the fastest timed step of each algorithm and layout kind, fastest first (``candidates``)
    candidates: list[Candidate] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
