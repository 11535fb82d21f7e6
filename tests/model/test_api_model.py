"""``tpusim.api.model`` gives a model's dimensions, packaged or from a user's file; bad input is a UserError."""

from __future__ import annotations

from pathlib import Path

import pytest

import tpusim.api as tp
from tests.small_model import SMALL_MODEL_YAML

SMALL_MODEL = SMALL_MODEL_YAML


def test_packaged_model_dimensions() -> None:
    gpt3 = tp.model("gpt3-175b")
    assert (gpt3.layers, gpt3.hidden, gpt3.heads, gpt3.head_dim, gpt3.ffn, gpt3.sequence) == (
        96, 12288, 96, 128, 49152, 2048)
    assert isinstance(gpt3, tp.TransformerModel)


@pytest.mark.parametrize("as_path", [str, Path])
def test_model_file_dimensions(tmp_path: Path, as_path: type) -> None:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL_MODEL)
    small = tp.model(as_path(path))
    assert (small.name, small.layers, small.hidden, small.ffn, small.sequence, small.vocabulary) == (
        "small-test", 2, 1024, 3072, 512, 51200)


def test_unknown_model_is_a_user_error() -> None:
    with pytest.raises(tp.UserError) as error:
        tp.model("gpt5")
    assert error.value.message.startswith("unknown model 'gpt5'; valid: gpt3-175b, llama2-70b, llama2-7b")
    assert issubclass(tp.UserError, tp.TpusimError)


def test_model_must_be_a_name_or_path() -> None:
    with pytest.raises(tp.UserError) as error:
        tp.model(175)  # type: ignore[arg-type]
    assert error.value.message == "model 175 must be a model name or the path of a model YAML file"
