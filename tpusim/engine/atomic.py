"""Files replaced atomically: a reader sees the old file or the new one, never a part of either.

Each write goes to a sibling temporary file of its own (process id and a random token), so concurrent writers of
one folder never share a temporary name, and a failed write (a full disk, a size limit) leaves no temporary file.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["replace_atomically", "write_atomic"]


def replace_atomically(target: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Let ``write`` fill a new temporary sibling of ``target``, then move it over ``target``."""
    # a sibling: the same file system, so os.replace is atomic
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(temporary, "xb") as handle:
            write(handle)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically."""
    replace_atomically(path, lambda handle: handle.write(text.encode()))
