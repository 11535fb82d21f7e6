"""``tpusim validate``: every reference number next to what tpusim computes, with its delta.

In the style of Calculon's validation table: quantity, reference, simulated, delta, tolerance. Rows: the physical ring
formulas of docs/network.md#physical-closed-forms, the authors' calibrated collective costs of
docs/network.md#the-calibrated-network, the worked GeMM examples of docs/validation.md#worked-gemm-examples (a
synthetic profile), and DES-versus-closed-form agreement of the authors' MeshSlice and collective forms for the GPT-3
and Megatron-NLG FF GeMMs at 256 chips.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from tpusim.config import Calibration, HardwareProfile, OpCalibration
from tpusim.config.requests import CollectiveRequest, GemmRequest
from tpusim.experiments.runners import run_request
from tpusim.hardware import load_hardware
from tpusim.units import MB, MiB, us


@dataclass
class Check:
    """One reference number next to tpusim's, with the relative delta it may have (field meanings:
    docs/validation.md#the-validation-table)."""

    quantity: str
    reference: float
    simulated: float
    tolerance: float  # relative
    unit: str = "us"
    group: str = "model"  # "model": formulas and worked examples; "measurement": a fit to hardware measurements
    explained: str = ""  # where the docs explain a known difference beyond the tolerance

    @property
    def delta(self) -> float:
        return (self.simulated - self.reference) / self.reference if self.reference else self.simulated

    @property
    def within(self) -> bool:
        return abs(self.delta) <= self.tolerance

    @property
    def ok(self) -> bool:
        """Within tolerance, or beyond it for a reason the docs explain."""
        return self.within or bool(self.explained)

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "delta": self.delta, "within": self.within, "ok": self.ok}


def toy_profile() -> HardwareProfile:
    """docs/validation.md#worked-gemm-examples: every alpha 10 us, every lambda 1 us, every beta 50e9 B/s, F = 250e12
    FLOP/s."""
    base = load_hardware("meshslice-sim")
    fit = OpCalibration(bandwidth=(50e9, 50e9), step_latency=1e-6, launch_overhead=10e-6)
    chip = base.chip.model_copy(update={"peak_flops": 250e12})
    return base.model_copy(update={"name": "toy-worked-examples",
                                   "description": "the worked GeMM examples (docs/validation.md#worked-gemm-examples)",
                                   "chip": chip,
                                   "calibration": Calibration(all_gather=fit, reduce_scatter=fit, send_recv=fit)})


def _collective(hardware: str | HardwareProfile, mesh: str, axis: int, op: str, nbytes: float,
                topology: str | None = None, **extra: object) -> float:
    result = run_request(CollectiveRequest, {"hardware": hardware, "mesh": mesh, "axis": axis, "op": op,
                                             "bytes": int(nbytes), "topology": topology, **extra})
    return float(result.time_s) / us


def _gemm(hardware: HardwareProfile | str, mesh: str, algorithm: str, dataflow: str, m: int, n: int, k: int,
          slices: int | None = None, **extra: object) -> tuple[float, float]:
    result = run_request(GemmRequest, {"hardware": hardware, "mesh": mesh, "algorithm": algorithm,
                                       "dataflow": dataflow, "m": m, "n": n, "k": k, "slices": slices,
                                       "fidelity": "auto", **extra})
    return float(result.time_s) / us, (result.analytic_time_s or float("nan")) / us


def checks() -> list[Check]:
    rows: list[Check] = []
    add = rows.append
    exact, rounded = 1e-9, 5e-5
    # docs/network.md#physical-closed-forms: tpuv4-wire: B = 45e9 per direction, a = 1 us, no software costs
    add(Check("64 MB AG, 16-chip wrapped axis, bidirectional (physical ring, bidirectional)", 681.6666666666,
              _collective("tpuv4-wire", "16x16", 1, "all-gather", 64 * MB, "4x4x16", axis_map="x*y,z"), rounded))
    add(Check("same, unidirectional ring (physical ring, one way)", 1348.3333333333,
              _collective("tpuv4-wire", "16x16", 1, "all-gather", 64 * MB, "4x4x16", axis_map="x*y,z", ring="uni"),
              rounded))
    add(Check("same, 16-chip line (physical line)", 1348.3333333333,
              _collective("tpuv4-wire", "1x16", 1, "all-gather", 64 * MB, "mesh:16"), rounded))
    add(Check("64 MB all-reduce on the wrapped axis (physical all-reduce)", 1363.3333333333,
              _collective("tpuv4-wire", "16x16", 1, "all-reduce", 64 * MB, "4x4x16", axis_map="x*y,z"), rounded))
    add(Check("[1024,4096] bf16 AG over x of 4x4x4 (scaling-book example)", 20.48,
              _collective("tpuv4-wire", "4x16", 0, "all-gather", 1024 * 4096 * 2 // 4, "4x4x4", axis_map="x,y*z"),
              1e-3))
    # docs/network.md#the-calibrated-network: the authors' calibrated model, s = 1 MiB shard
    s = MiB
    add(Check("tpu-fit AG axis 1, n=8 (calibrated model)", 140.04,
              _collective("meshslice-tpu-fit", "8x8", 1, "all-gather", 8 * s), rounded))
    add(Check("tpu-fit AG axis 0, n=32 (calibrated model)", 1351.24,
              _collective("meshslice-tpu-fit", "32x8", 0, "all-gather", 32 * s), rounded))
    add(Check("tpu-fit RdS axis 1, n=8 (calibrated model)", 177.20,
              _collective("meshslice-tpu-fit", "8x8", 1, "reduce-scatter", 8 * s), rounded))
    add(Check("tpu-fit RdS axis 0, n=32 (calibrated model)", 1047.68,
              _collective("meshslice-tpu-fit", "32x8", 0, "reduce-scatter", 32 * s), rounded))
    add(Check("tpu-fit broadcast axis 1, n=8 (calibrated model)", 61.15,
              _collective("meshslice-tpu-fit", "8x8", 1, "broadcast", s), rounded))
    add(Check("tpu-fit Cannon skew n=16 (calibrated model)", 651.15,
              _collective("meshslice-tpu-fit", "16x16", 1, "shift", s, offset=8), rounded))
    add(Check("sim AG n=32 (calibrated model)", 827.76,
              _collective("meshslice-sim", "32x8", 0, "all-gather", 32 * s), rounded))
    add(Check("sim RdS n=8 (calibrated model)", 288.80, _collective("meshslice-sim", "8x8", 1, "reduce-scatter", 8 * s),
              rounded))
    # docs/validation.md#worked-gemm-examples: M=65536, K=8192, N=32768 on 8x4, toy profile, prefetch ideal
    toy = toy_profile()
    dims = {"m": 65536, "n": 32768, "k": 8192}
    for label, algorithm, dataflow, slices, reference in (
        ("Collective OS (worked example)", "collective", "os", None, 6424.31),
        ("MeshSlice OS, S=4 (worked example)", "meshslice", "os", 4, 5002.25),
        ("SUMMA OS, S=8 (worked example)", "summa", "os", None, 4750.59),
        ("Collective LS (worked example)", "collective", "ls", None, 12464.11),
        ("MeshSlice LS, S=4 (worked example)", "meshslice", "ls", 4, 9808.78),
    ):
        simulated, _ = _gemm(toy, "8x4", algorithm, dataflow, slices=slices, prefetch="ideal", **dims)
        add(Check(label, reference, simulated, 5e-6))
    # DES against the authors' closed forms for the FF GeMMs of both models at 32x8
    for model, hidden in (("gpt3-175b", 12288), ("megatron-nlg-530b-ms", 20480)):
        tokens = 256 * 2048
        for name, (m, n, k), dataflow in (("FF1", (tokens, 4 * hidden, hidden), "os"),
                                          ("FF2", (tokens, hidden, 4 * hidden), "ls")):
            for algorithm, slices in (("collective", None), ("meshslice", 8)):
                for profile in ("meshslice-tpu-fit", "meshslice-sim"):
                    simulated, twin = _gemm(profile, "32x8", algorithm, dataflow, m, n, k, slices=slices)
                    add(Check(f"{model} {name} {algorithm} on {profile}: DES vs closed form", twin, simulated,
                              exact))
    return rows


MEASURED_SLICE = "2x2x4"  # a Cloud TPU v4-32: 4 hosts of 4 chips, no wraparound
MEASURED_AXES = "z,x*y"  # axis 0 the line of 4 hosts, axis 1 one host's 2x2 block
MEASURED_SHARDS = tuple(MiB << i for i in range(8))  # 1 MiB .. 128 MiB
MEASURED_OPS = ("all-gather", "reduce-scatter", "send-recv")
_EXPLAINED = "docs/validation.md#where-the-v4-32-fit-and-the-model-differ"
EXPLAINED_DIFFERENCES = frozenset({("all-gather", 0)})
"""(operation, axis) pairs beyond 25% whose cause docs/validation.md explains."""


def measured_checks(explained: frozenset[tuple[str, int]] = frozenset(),
                    hardware: str | HardwareProfile = "tpuv4", pairs: frozenset[tuple[str, int]] | None = None
                    ) -> list[Check]:
    """The physical ``hardware`` model (``tpuv4``) next to the MeshSlice authors' fit to their v4-32 measurements,
    per logical axis, operation and shard size; ``explained`` names the (operation, axis) pairs whose difference
    the docs explain, ``pairs`` (None: all) the pairs to compare."""
    rows = []
    for axis in (0, 1):
        where = "line of 4 along z" if axis == 0 else "2x2 block x*y"
        for op in MEASURED_OPS:
            if pairs is not None and (op, axis) not in pairs:
                continue
            for shard in MEASURED_SHARDS:
                nbytes = shard if op == "send-recv" else 4 * shard
                model = _collective(hardware, "4x4", axis, op, nbytes, MEASURED_SLICE, axis_map=MEASURED_AXES)
                fit = _collective("meshslice-tpu-fit", "4x4", axis, op, nbytes)
                rows.append(Check(f"v4-32 {op}, axis {axis} ({where}), {shard // MiB} MiB shard (measured fit)",
                                  fit, model, 0.25, group="measurement",
                                  explained=_EXPLAINED if (op, axis) in explained else ""))
    return rows


def run_validation(progress: Callable[[str], None] | None = None) -> list[Check]:
    results = checks() + measured_checks(EXPLAINED_DIFFERENCES)
    if progress is not None:
        progress(f"{len(results)} checks")
    return results
