"""The model configs load with the reference's dimensions, and bad model files fail clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpusim.errors import ConfigError, UnknownNameError
from tpusim.model.registry import load_model, model_names


def test_every_model_file_loads() -> None:
    assert model_names() == ["gpt3-175b", "llama2-70b", "llama2-7b", "llama3.1-405b", "llama3.1-70b", "llama3.1-8b",
                             "megatron-nlg-530b", "megatron-nlg-530b-ms", "mistral-7b", "palm-540b"]
    for name in model_names():
        assert load_model(name).name == name


@pytest.mark.parametrize(
    ("name", "layers", "hidden", "heads", "head_dim", "per_layer"),
    [
        ("gpt3-175b", 96, 12288, 96, 128, 12 * 12288**2),
        ("megatron-nlg-530b", 105, 20480, 128, 160, 12 * 20480**2),
        ("megatron-nlg-530b-ms", 105, 20480, 160, 128, 12 * 20480**2),
    ],
)
def test_dimensions(name: str, layers: int, hidden: int, heads: int, head_dim: int, per_layer: int) -> None:
    model = load_model(name)
    assert (model.layers, model.hidden, model.heads, model.head_dim) == (layers, hidden, heads, head_dim)
    assert model.ffn == 4 * hidden and model.sequence == 2048
    assert model.params_per_layer == per_layer  # 12 h^2 (docs/workloads.md#models)


def test_unknown_model_suggests_the_closest() -> None:
    with pytest.raises(UnknownNameError) as info:
        load_model("gpt3-175")
    assert "gpt3-175b" in str(info.value.suggestion)


def test_inconsistent_kv_heads_are_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ndescription: x\nlayers: 2\nhidden: 100\nheads: 4\nkv_heads: 3\nhead_dim: 32\n"
                   "ffn: 400\nsequence: 16\n")
    with pytest.raises(ConfigError) as info:
        load_model(str(bad))
    assert info.value.message == (f"{bad}: kv_heads = 3 must divide heads = 4 (each key / value head serves a "
                                  "whole group of query heads)")
