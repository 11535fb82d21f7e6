"""Wall-clock benchmarks of the simulator (a script, not a test).

    python benchmarks/run.py                 # every figure, median of 3, a table on stdout
    python benchmarks/run.py --json          # exactly one JSON object on stdout; progress on stderr
    python benchmarks/run.py --repeat 5 --only collective_transfers_per_s
    python benchmarks/run.py --only allgather_ring_2048_full_s,peak_rss_mb_gemm_2048_full   # several, in order

Each benchmark is a function in ``BENCHMARKS`` that builds its inputs (not timed), times the simulation
itself and returns a ``Measurement``. Add a figure by writing such a function and registering it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tpusim.api as tp
from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.factory import network_for, place_mesh
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.engine.context import CACHE_ENV, Context
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import analytic_gemm
from tpusim.hardware import load_hardware
from tpusim.model.registry import load_model
from tpusim.topology import MeshMapping, map_mesh, parse_topology
from tpusim.vocabulary import CollectiveOp, Dataflow, Prefetch

GROUP_BYTES = 64_000_000  # 64 MB per gathered tensor


@dataclass
class Measurement:
    """One run of one benchmark: the figure, its unit, and facts to check the run did what it claims."""

    value: float
    unit: str
    info: dict[str, Any] = field(default_factory=dict)


Program = Callable[[Device], Any]


WIRE = "tpuv4-wire"  # TPUv4 links without software costs: the model wire-only simulators use


def _simulate(mapping: MeshMapping, program: Program) -> tuple[float, dict[str, Any]]:
    """Run ``program`` on every chip of ``mapping`` on ``tpuv4-wire`` at full fidelity; (wall seconds, facts)."""
    hardware = load_hardware(WIRE)
    begin = time.perf_counter()
    sim = Simulation(network_for(hardware, mapping))
    runtime = CollectiveRuntime(sim, network_for(sim.hardware, sim.mapping))
    run_spmd(sim, runtime, program, lambda dev: ())
    wall = time.perf_counter() - begin
    totals = runtime.network.totals(sim, sim.now)
    assert totals is not None
    return wall, {"simulated_s": sim.now, "transfers": totals.transfers, "events": sim.events}


ROUNDS = 10  # repeat the scenario inside one simulation so start-up does not dominate a 40 ms figure


def collective_transfers_per_s() -> Measurement:
    """torus:16x16, mesh 16x16: every chip gathers 4 MB on axis 0 and on axis 1 at once (64 MB per group),
    ten rounds in one simulation."""
    mapping = map_mesh(parse_topology("torus:16x16"), 16, 16)
    shard = Tensor((GROUP_BYTES // 16,), "int8")

    def program(dev: Device):  # type: ignore[no-untyped-def]
        for _ in range(ROUNDS):
            yield dev.wait(dev.all_gather(shard, axis=0), dev.all_gather(shard, axis=1))

    wall, info = _simulate(mapping, program)
    return Measurement(info["transfers"] / wall, "transfers/s", {**info, "wall_s": wall})


def allgather_torus_64x32_full_s() -> Measurement:
    """torus:64x32, mesh 64x32: 64 MB gathered over all 2048 chips, axis 1 then axis 0 (dimension-ordered)."""
    mapping = map_mesh(parse_topology("torus:64x32"), 64, 32)
    shard = Tensor((GROUP_BYTES // 2048,), "int8")

    def program(dev: Device):  # type: ignore[no-untyped-def]
        row = yield dev.all_gather(shard, axis=1)
        yield dev.all_gather(row, axis=0)

    wall, info = _simulate(mapping, program)
    closed = _closed_form(mapping, [(1, GROUP_BYTES // 2048), (0, GROUP_BYTES // 64)])
    return Measurement(wall, "s", {**info, "closed_form_s": closed})


def _closed_form(mapping: MeshMapping, gathers: list[tuple[int, int]]) -> float:
    """The summed twins of all-gathers run one after another, each (axis, bytes of each caller's shard)."""
    network = network_for(load_hardware(WIRE), mapping)
    total = 0.0
    for axis, nbytes in gathers:
        twin = network.twin(CollectiveCall(CollectiveOp.ALL_GATHER, axis, nbytes))
        assert twin is not None
        total += twin
    return total


def allgather_ring_2048_full_s() -> Measurement:
    """torus:2048, mesh 1x2048: one 64 MB all-gather over a 2048-chip wrapped ring."""
    mapping = map_mesh(parse_topology("torus:2048"), 1, 2048)
    shard = Tensor((GROUP_BYTES // 2048,), "int8")

    def program(dev: Device):  # type: ignore[no-untyped-def]
        yield dev.all_gather(shard, axis=1)

    wall, info = _simulate(mapping, program)
    return Measurement(wall, "s", {**info, "closed_form_s": _closed_form(mapping, [(1, GROUP_BYTES // 2048)])})


def _status_kb(key: str) -> int:
    """A ``kB`` line of this process's /proc/self/status (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith(f"{key}:")))


def ring_bytes_per_transfer() -> Measurement:
    """Memory of ``allgather_ring_2048_full_s`` per link transfer, in a fresh process: its peak resident memory
    (``VmHWM``) over what it held with the ring mapped and every module imported, divided by the transfers."""
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import run; "
            "run.load_hardware(run.WIRE); run.map_mesh(run.parse_topology('torus:2048'), 1, 2048); "
            "before = run._status_kb('VmRSS'); figure = run.allgather_ring_2048_full_s(); "
            "print(before, run._status_kb('VmHWM'), figure.info['transfers'])")
    _, out = _subprocess([sys.executable, "-c", code])
    before, peak, transfers = (int(word) for word in out.split())
    return Measurement((peak - before) * 1024 / transfers, "B/transfer",
                       {"rss_before_mb": before / 1024, "peak_mb": peak / 1024, "transfers": transfers})


FF1 = {"m": 524288, "k": 12288, "n": 49152}  # GPT-3 FF1 at 256 sequences: M = 256 x 2048 tokens


_COLD_FOLDERS: list[tempfile.TemporaryDirectory] = []


def _cold() -> Context:
    """Each timed run starts from an empty timing cache: a fresh context with a fresh, empty disk folder."""
    folder = tempfile.TemporaryDirectory()
    _COLD_FOLDERS.append(folder)
    return Context.with_cache(folder.name)


def _timed_cold(call: Callable[..., Any], **fields: Any) -> tuple[float, Any]:
    """Wall seconds and result of ``call(**fields)`` (an API entry point) on a cold cache."""
    context = _cold()
    begin = time.perf_counter()
    result = call(**fields, context=context)
    return time.perf_counter() - begin, result


def gemm_full_s() -> Measurement:
    """MeshSlice OS, GPT-3 FF1, 16x16 on meshslice-tpu-fit, K = 8, full fidelity."""
    wall, result = _timed_cold(tp.gemm, hardware="meshslice-tpu-fit", mesh="16x16", algorithm="meshslice",
                               dataflow="os", slices=8, fidelity="full", **FF1)
    return Measurement(wall, "s", {"simulated_s": result.time_s, "events": result.events})


def layer_full_s() -> Measurement:
    """One GPT-3 layer forward and backward, 32x8 on meshslice-tpu-fit, MeshSlice K = 8, full fidelity."""
    one_layer = load_model("gpt3-175b").model_copy(update={"layers": 1})
    wall, result = _timed_cold(tp.step, model=one_layer, hardware="meshslice-tpu-fit", mesh="32x8",
                               algorithm="meshslice", slices=8, fidelity="full")
    return Measurement(wall, "s", {"simulated_s": result.step_time_s})


def gemm_symmetric_ms() -> Measurement:
    """The GeMM of gemm_full_s in symmetric fidelity: median of 5 warm calls, each really simulated."""
    args = dict(hardware="meshslice-tpu-fit", mesh="16x16", algorithm="meshslice", dataflow="os", slices=8,
                fidelity="symmetric", **FF1)
    context = Context()
    context.timings.enabled = False  # warm means imports and registries, not a cached answer
    tp.gemm(**args, context=context)
    walls = []
    for _ in range(5):
        begin = time.perf_counter()
        result = tp.gemm(**args, context=context)
        walls.append(time.perf_counter() - begin)
    return Measurement(1e3 * statistics.median(walls), "ms", {"simulated_s": result.time_s})


def gemm_analytic_us() -> Measurement:
    """The closed-form twin of the same GeMM (``analytic_gemm``, the mapping built once): median of 50 calls."""
    hardware = load_hardware("meshslice-tpu-fit")
    mapping = place_mesh(hardware, 16, 16)
    problem = GemmProblem(FF1["m"], FF1["n"], FF1["k"], Dataflow.OS)
    params = GemmParams(Prefetch.IDEAL, slices=8)
    algorithm = get_algorithm("meshslice")
    walls = []
    for _ in range(50):
        begin = time.perf_counter()
        twin = analytic_gemm(algorithm, problem, params, network_for(hardware, mapping))
        walls.append(time.perf_counter() - begin)
    return Measurement(1e6 * statistics.median(walls), "us", {"simulated_s": twin})


def step_symmetric_s() -> Measurement:
    """GPT-3 step, 2048 chips as 256x8 on meshslice-sim, MeshSlice K = 3, fidelity auto, cold cache."""
    wall, result = _timed_cold(tp.step, model="gpt3-175b", hardware="meshslice-sim", mesh="256x8",
                               algorithm="meshslice", slices=3)
    return Measurement(wall, "s", {"simulated_s": result.step_time_s, "fidelity": result.fidelity})


def tune_s() -> Measurement:
    """Default tune for GPT-3 at 2048 chips on meshslice-sim (memory ignored), cold cache."""
    wall, result = _timed_cold(tp.tune, model="gpt3-175b", hardware="meshslice-sim", chips=2048, ignore_memory=True)
    return Measurement(wall, "s", {"best_mesh": result.best.mesh, "best_step_s": result.best.step_time_s})


def _subprocess(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall seconds and standard output of a child process that must succeed."""
    import subprocess

    begin = time.perf_counter()
    completed = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - begin
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {completed.stderr.strip()}")
    return wall, completed.stdout


def reproduce_quick_s() -> Measurement:
    """tpusim reproduce all --quick into a temporary folder (a fresh process, cold cache)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        wall, _ = _subprocess([sys.executable, "-m", "tpusim", "reproduce", "all", "--quick",
                               "--out", folder])
    return Measurement(wall, "s")


STARTUP_COMMAND = ["collective", "--hardware", "tpuv4", "--topology", "torus:16", "--mesh", "1x16", "--axis", "1",
                   "--op", "all-gather", "--bytes", "64MB", "--json"]
STARTUP_PROCESSES = 5  # fresh processes per run of the figure; their median is the figure


def _startup(command: list[str]) -> tuple[list[float], float, str, str]:
    """Whole-process wall times of ``tpusim COMMAND`` in ``STARTUP_PROCESSES`` fresh processes, with the untimed
    compiling run's, the last one's standard output and the name of the program run.

    The children compile their bytecode once, in an untimed first run, into a cache folder of their own, as an
    installed package has it (``PYTHONDONTWRITEBYTECODE`` would otherwise make every start recompile tpusim).
    """
    with tempfile.TemporaryDirectory() as folder:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = folder
        # the installed `tpusim` script, as a user types it; `python -m tpusim` where there is none (it adds runpy)
        script = Path(sys.executable).with_name("tpusim")
        argv = [str(script) if script.exists() else sys.executable, *([] if script.exists() else ["-m", "tpusim"]),
                *command]
        compile_run, _ = _subprocess(argv, env)
        runs = [_subprocess(argv, env) for _ in range(STARTUP_PROCESSES)]
    return [wall for wall, _ in runs], compile_run, runs[-1][1], Path(argv[0]).name


def startup_small_collective_s() -> Measurement:
    """Whole-process wall time of ``tpusim collective`` (a 64 MB all-gather over 16 chips, ``--json``): the median
    of five fresh processes."""
    walls, compile_run, stdout, program = _startup(STARTUP_COMMAND)
    result = json.loads(stdout)
    return Measurement(statistics.median(walls), "s", {"processes_s": walls, "compile_run_s": compile_run,
                                                       "simulated_s": result["time_s"], "events": result["events"],
                                                       "command": program})


def startup_version_s() -> Measurement:
    """Whole-process wall time of ``tpusim --version``: the median of five fresh processes."""
    walls, compile_run, stdout, program = _startup(["--version"])
    return Measurement(statistics.median(walls), "s", {"processes_s": walls, "compile_run_s": compile_run,
                                                       "printed": stdout.strip(), "command": program})


def peak_rss_mb_gemm_2048_full() -> Measurement:
    """Peak resident memory of a full-fidelity MeshSlice GeMM (GPT-3 FF1 at 2048 sequences) on 256x8.

    The child reads its own high-water mark, ``VmHWM`` of /proc/self/status, which exec resets. Not its
    ``ru_maxrss``: that keeps the peak of the process it was started from, which here is this script, grown by
    the figures before this one."""
    return _child_peak("tp.gemm(hardware='meshslice-tpu-fit', mesh='256x8', algorithm='meshslice', dataflow='os', "
                       "slices=3, fidelity='full', m=2048*2048, k=12288, n=49152)")


def _child_peak(call: str) -> Measurement:
    """Peak resident memory of a fresh process that runs ``tpusim.api`` ``call`` (Python source using ``tp``),
    read by the child itself from its ``VmHWM``."""
    code = (f"import tpusim.api as tp; {call}; "
            "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')))")
    _, out = _subprocess([sys.executable, "-c", code])
    return Measurement(int(out.strip().splitlines()[-1]) / 1024, "MB")  # VmHWM is in kB (KiB)


POD_LAYOUT = "16x16x16"  # a whole TPUv4 pod: 16 data-parallel replicas of a 16x16 MeshSlice mesh
POD_STRAGGLER = dict(model="gpt3-175b", hardware="tpuv4", mesh=POD_LAYOUT, algorithm="meshslice", slices=4,
                     slow_chips=["3:1.5"], fidelity="full")


def pod_straggler_full_s() -> Measurement:
    """GPT-3 step on a 4096-chip TPUv4 pod (16x16x16: D = 16 replicas of 16x16), one chip 1.5x slower, full
    fidelity, cold cache."""
    wall, result = _timed_cold(tp.step, **POD_STRAGGLER)
    return Measurement(wall, "s", {"simulated_s": result.step_time_s, "fidelity": result.fidelity,
                                   "notes": result.notes})


def peak_rss_mb_pod_straggler() -> Measurement:
    """Peak resident memory of ``pod_straggler_full_s``'s step, in a child process that reads its own ``VmHWM``
    (see ``peak_rss_mb_gemm_2048_full``)."""
    return _child_peak(f"tp.step(**{POD_STRAGGLER!r})")


def pod_step_symmetric_s() -> Measurement:
    """GPT-3 step on a 4096-chip TPUv4 pod (16x16x16), MeshSlice K = 4, fidelity auto (symmetric), cold cache."""
    wall, result = _timed_cold(tp.step, model="gpt3-175b", hardware="tpuv4", mesh=POD_LAYOUT, algorithm="meshslice",
                               slices=4)
    return Measurement(wall, "s", {"simulated_s": result.step_time_s, "fidelity": result.fidelity})


def pod_tune_s() -> Measurement:
    """Default tune of GPT-3 on 4096 TPUv4 chips over every layout D x R x C (memory feasible), cold cache."""
    wall, result = _timed_cold(tp.tune, model="gpt3-175b", hardware="tpuv4", chips=4096)
    return Measurement(wall, "s", {"best_mesh": result.best.mesh, "best_step_s": result.best.step_time_s,
                                   "best_mfu": result.best.mfu})


def step_405b_512_symmetric_s() -> Measurement:
    """Llama 3.1 405B step on 512 TPU v5p chips (8x8x8) as fsdp 64 x tensor 8 (Megatron 1D), batch 512, full
    recomputation, fused causal attention, embedding and optimizer, fidelity symmetric, cold cache."""
    wall, result = _timed_cold(tp.step, model="llama3.1-405b", hardware="tpuv5p", layout="fsdp=64,tensor=8",
                               algorithm="tp1d", batch=512, recompute="full", attention="fused-causal",
                               embedding=True, optimizer=True, fidelity="symmetric")
    return Measurement(wall, "s", {"simulated_s": result.step_time_s, "fidelity": result.fidelity,
                                   "memory_gb": result.memory_bytes_per_chip / 1e9})


def validate_measurements_s() -> Measurement:
    """``validate --measurements`` over the shipped table of measured runs: every row read, mapped to its step
    request and simulated where tpusim supports it, cold cache."""
    from tpusim.experiments.measurements.compare import RowStatus, compare_measurements

    context = _cold()
    begin = time.perf_counter()
    rows = compare_measurements(context=context)
    wall = time.perf_counter() - begin
    return Measurement(wall, "s", {"rows": len(rows), "ok": sum(row.status is RowStatus.OK for row in rows)})


BENCHMARKS: dict[str, Callable[[], Measurement]] = {
    "collective_transfers_per_s": collective_transfers_per_s,
    "allgather_torus_64x32_full_s": allgather_torus_64x32_full_s,
    "allgather_ring_2048_full_s": allgather_ring_2048_full_s,
    "ring_bytes_per_transfer": ring_bytes_per_transfer,
    "gemm_full_s": gemm_full_s,
    "layer_full_s": layer_full_s,
    "gemm_symmetric_ms": gemm_symmetric_ms,
    "gemm_analytic_us": gemm_analytic_us,
    "step_symmetric_s": step_symmetric_s,
    "tune_s": tune_s,
    "reproduce_quick_s": reproduce_quick_s,
    "peak_rss_mb_gemm_2048_full": peak_rss_mb_gemm_2048_full,
    "startup_small_collective_s": startup_small_collective_s,
    "startup_version_s": startup_version_s,
    "pod_straggler_full_s": pod_straggler_full_s,
    "peak_rss_mb_pod_straggler": peak_rss_mb_pod_straggler,
    "pod_step_symmetric_s": pod_step_symmetric_s,
    "pod_tune_s": pod_tune_s,
    "step_405b_512_symmetric_s": step_405b_512_symmetric_s,
    "validate_measurements_s": validate_measurements_s,
}


def _benchmark_names(text: str) -> list[str]:
    """``--only``: one benchmark name or several, comma-separated."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown benchmark {(unknown or [text])[0]!r}; valid: "
                                         f"{', '.join(BENCHMARKS)}")
    return names


def run(names: list[str], repeat: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for name in names:
        runs: list[Measurement] = []
        for k in range(repeat):
            print(f"{name}: run {k + 1}/{repeat} ...", file=sys.stderr, flush=True)
            runs.append(BENCHMARKS[name]())
            closed = runs[-1].info.get("closed_form_s")
            if closed is not None and abs(runs[-1].info["simulated_s"] - closed) > 1e-9 * closed:
                raise SystemExit(f"{name}: simulated {runs[-1].info['simulated_s']!r} s differs from its closed "
                                 f"form {closed!r} s")
            print(f"{name}: {runs[-1].value:.6g} {runs[-1].unit}", file=sys.stderr, flush=True)
        figures[name] = {
            "median": statistics.median(m.value for m in runs),
            "unit": runs[0].unit,
            "runs": [m.value for m in runs],
            "info": runs[0].info,
        }
    return {
        "repeat": repeat,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "benchmarks": figures,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="exactly one JSON object on stdout")
    parser.add_argument("--repeat", type=int, default=3, help="runs per benchmark; the median is reported")
    parser.add_argument("--only", action="extend", type=_benchmark_names, metavar="NAME[,NAME...]",
                        help="run only these benchmarks, in this order (comma-separated or repeated)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat} must be >= 1")
    os.environ.pop(CACHE_ENV, None)  # every figure names its own cold cache
    report = run(args.only or list(BENCHMARKS), args.repeat)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for name, figure in report["benchmarks"].items():
            print(f"{name:32s} {figure['median']:12.6g} {figure['unit']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
