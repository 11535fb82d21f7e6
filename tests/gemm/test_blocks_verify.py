"""Every registered algorithm and dataflow computes the exact X @ W (numpy payloads) on the FF GeMMs of gated,
grouped-query, multi-query and parallel blocks, K / V heads replicated past the feature split included."""

from __future__ import annotations

import pytest

from tpusim.collectives.factory import network_for
from tpusim.config import TransformerModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import algorithms, get_algorithm
from tpusim.gemm.simulate import simulate_gemm
from tpusim.model.feasibility import parts_for
from tpusim.model.layer import Pass, ff_layers
from tpusim.vocabulary import Dataflow


def _model(**fields: object) -> TransformerModel:
    base: dict[str, object] = {"name": "t", "description": "test block", "layers": 2, "hidden": 128, "heads": 4,
                               "head_dim": 32, "ffn": 192, "sequence": 32}
    return TransformerModel.model_validate({**base, **fields})


BLOCKS = {
    "gated-gqa": _model(kv_heads=2, mlp={"kind": "gated", "activation": "silu"}),
    "mqa": _model(kv_heads=1, mlp={"kind": "gated", "activation": "gelu"}),
    "parallel": _model(hidden=160, kv_heads=1, ffn=320, mlp={"kind": "gated"}, block="parallel"),
    "gqa-plain": _model(heads=8, kv_heads=2, head_dim=16, ffn=256, mlp={"activation": "relu"}),
}
TOKENS = 4 * 32  # 4 sequences of 32


def _problems(model: TransformerModel, feature_parts: int) -> list[GemmProblem]:
    """The distinct GeMMs of the block's four FF layers under every dataflow, all three passes each."""
    found: dict[tuple[int, int, int, Dataflow], GemmProblem] = {}
    for dataflow in Dataflow:
        layers = ff_layers(model, TOKENS, (dataflow,) * 4, feature_parts=feature_parts)
        for layer in layers:
            for which in Pass:
                problem = layer.gemm(which, "fp32")
                found.setdefault((problem.m, problem.n, problem.k, problem.dataflow), problem)
    return list(found.values())


@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.slow] if name == "parallel" else [])
                                  for name in sorted(BLOCKS)])  # the parallel block's GeMMs are the largest
@pytest.mark.parametrize("algorithm", sorted(algorithms()))
def test_block_gemms_are_exact(profile_mesh, name: str, algorithm: str) -> None:
    chosen = algorithms()[algorithm]
    mesh = (4, 4) if chosen.parallelism == "2d" else (4, 1)  # 4 chips of features: K / V heads replicated
    hardware, mapping = profile_mesh("tpuv4", *mesh)
    feature_parts = parts_for(mesh, chosen.parallelism)[1]
    problems = _problems(BLOCKS[name], feature_parts)
    if chosen.parallelism != "1d-batch":
        model = BLOCKS[name]
        kv = max(model.kv_heads, feature_parts)
        assert any(p.n == (model.heads + 2 * kv) * model.head_dim or p.k == (model.heads + 2 * kv) * model.head_dim
                   for p in problems)
    for problem in problems:
        params = GemmParams()
        if chosen.uses_slices:  # two slices where the sliced dimension allows, else its smallest feasible count
            options = chosen.slice_options(problem, mesh, GemmParams(slices=1)) or []
            params = GemmParams(slices=2 if 2 in options else options[0])
        result = simulate_gemm(problem, get_algorithm(algorithm), params, network_for(hardware, mapping), verify=True)
        assert result.max_abs_error is not None and result.max_abs_error < 1e-9, problem
