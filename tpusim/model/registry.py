"""Named transformer models (packaged, see ``tpusim.config.catalog``) and models loaded from a user's file."""

from __future__ import annotations

from tpusim.config.catalog import MODELS, looks_like_path
from tpusim.config.loader import load_yaml, validate
from tpusim.config.model import TransformerModel
from tpusim.errors import ConfigError

__all__ = ["list_models", "load_model", "model_names"]


def model_names() -> list[str]:
    """Names of the packaged models (or of those in ``$TPUSIM_CONFIG_DIR/models``), sorted."""
    return MODELS.names()


def load_model(name_or_path: str) -> TransformerModel:
    """A model by name (``"gpt3-175b"``) or by path to a YAML file."""
    path = MODELS.resolve(name_or_path)
    shown = MODELS.shown(path)
    model = validate(TransformerModel, load_yaml(path, "model", shown), shown)
    if not looks_like_path(name_or_path) and model.name != name_or_path:
        raise ConfigError(f"{shown}: name: {model.name!r} must match the file name {name_or_path!r}")
    return model


def list_models() -> list[TransformerModel]:
    return [load_model(name) for name in model_names()]
