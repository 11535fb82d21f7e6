"""What every result object offers: ``to_dict()`` (the CLI's ``--json`` fields) and ``to_frame()``."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any


class ResultMixin:
    """For dataclass results."""

    def to_dict(self) -> dict[str, Any]:
        fields: dict[str, Any] = asdict(self)  # type: ignore[call-overload]
        return fields

    def to_frame(self) -> Any:
        """A one-row pandas DataFrame (pandas is imported only here)."""
        import pandas as pd

        return pd.DataFrame([self.to_dict()])
