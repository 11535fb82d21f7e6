"""The registry of named transformer models in ``configs/models``."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from tpusim.config.loader import display_path, load_yaml, validate
from tpusim.config.model import TransformerModel
from tpusim.errors import ConfigError, unknown_name
from tpusim.hardware.profiles import config_root


def _models_dir() -> Path:
    return config_root() / "models"


def model_names() -> list[str]:
    folder = _models_dir()
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def load_model(name_or_path: str) -> TransformerModel:
    """A model by registered name (``"gpt3-175b"``) or by path to a YAML file."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        path = Path(name_or_path)
    else:
        names = model_names()
        if name_or_path not in names:
            raise unknown_name("model", name_or_path, names)
        path = _models_dir() / f"{name_or_path}.yaml"
    return _load(path.resolve(), display_path(path))


@cache
def _load(path: Path, shown: str) -> TransformerModel:
    model = validate(TransformerModel, load_yaml(path, "model"), shown)
    if path.parent == _models_dir().resolve() and model.name != path.stem:
        raise ConfigError(f"{shown}: name: {model.name!r} must match the file name {path.stem!r}")
    return model


def list_models() -> list[TransformerModel]:
    return [load_model(name) for name in model_names()]
