"""Keyed digests of stored state: a secret key per folder, and HMAC-SHA256 of canonical JSON under it.

A plain digest stored beside the data it covers proves nothing: whoever edits the data can recompute it. A keyed
digest (HMAC-SHA256, RFC 2104) can only be recomputed by someone who can read the folder's key, a file
``KEY_NAME`` of 32 random bytes (hex) that tpusim creates, private to its owner (mode 0600), the first time it
writes the folder's state. A run folder and a disk cache folder each have their own, so copying the state of one
folder into another does not make it trusted there. State whose digest does not verify is never believed: it is
recomputed (docs/results.md#stored-state-and-its-digests).

The key file is read and written only through ``tpusim.files`` (a link, FIFO or device there is refused, never
followed). A key file that is damaged (not 64 hex digits) is replaced by a new key, which makes every digest made
under the old one fail, so the state it covered is recomputed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from tpusim.files import FileRefused, open_regular, read_bounded, replace_atomically

__all__ = ["KEY_NAME", "folder_key", "keyed_digest", "verified"]

KEY_NAME = ".key"
_KEY_BYTES = 32
"""256 bits: the key length HMAC-SHA256 is defined for (its block size is larger, its output this)."""
_PRIVATE = 0o600


def _canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def keyed_digest(key: bytes, data: Any) -> str:
    """HMAC-SHA256 under ``key``, in hex, of ``data``: bytes as they are, anything else as its canonical JSON
    (sorted keys, no spaces)."""
    message = data if isinstance(data, bytes) else _canonical(data)
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def verified(key: bytes, data: Any, digest: object) -> bool:
    """Whether ``digest`` is ``data``'s keyed digest under ``key`` (compared in constant time)."""
    if not isinstance(digest, str):
        return False
    try:
        return hmac.compare_digest(keyed_digest(key, data), digest)
    except ValueError:  # a value JSON cannot hold (NaN) was never digested
        return False


def _parsed(text: bytes) -> bytes | None:
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return None
    return key if len(key) == _KEY_BYTES else None


def folder_key(folder: Path, subject: str) -> bytes:
    """The key of ``folder``, created there if it has none (or replaced when damaged). ``subject`` names the folder
    in messages (``"output folder"``). A key file that is not a regular file is ``FileRefused``; one that cannot be
    written raises its ``OSError``."""
    path = folder / KEY_NAME
    if os.path.lexists(path):
        found = _parsed(read_bounded(path, f"the key file of the {subject}", "results_bytes", follow=False))
        if found is not None:
            return found
        key = secrets.token_bytes(_KEY_BYTES)
        replace_atomically(path, lambda handle: handle.write(key.hex().encode()), f"the key file of the {subject}",
                           mode=_PRIVATE)
        return key
    key = secrets.token_bytes(_KEY_BYTES)
    try:
        descriptor = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, f"the key file of the {subject}",
                                  follow=False, mode=_PRIVATE)
    except FileRefused as refused:
        if os.path.lexists(path):  # created by another process sharing the folder since: use its key
            return folder_key(folder, subject)
        raise OSError(None, refused.reason) from None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(key.hex().encode())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return key
