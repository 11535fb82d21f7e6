"""Every file tpusim writes, and every file of its own it reads back, goes through here.

Writes (results, run meta, traces, link maps, figures, cache entries) replace their target atomically: the new
content goes to a sibling temporary file of its own (process id and a random token, created with ``O_EXCL`` and
``O_NOFOLLOW``, so it is never an existing file or a link planted under that name), then is renamed over the
target. A reader sees the old file or the new one, never a part of either, and a failed write (a full disk, a size
limit) leaves no temporary file. A rename replaces whatever has the target's name, so the target is checked with
``lstat`` first: only a missing path or a regular file is replaced. A device node (``/dev/null`` as root), a FIFO,
a directory, a socket or a symbolic link is refused with one line naming the path and what it is, before and again
just before the rename.

Reads of tpusim's own state (results.json, run_meta.json, cache entries) and of the files a user names (YAML,
CSV) open with ``O_NONBLOCK`` (a FIFO must not block the open) and check with ``fstat`` that what was opened is a
regular file, and read at most a size limit (``tpusim.limits``) plus one byte: ``/dev/zero`` is never read. State
files are also opened with ``O_NOFOLLOW`` (tpusim never writes a link there; one found there is not its own), while
a file the user names may be a link to a regular file.

This module imports only the errors and the limits, so every layer may use it (docs/limits.md#files).
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO

from tpusim.errors import OutputPathError, UserError
from tpusim.limits import exceeds, limit_of

__all__ = ["DIRECTORY", "FileRefused", "UnsafePathError", "check_target", "create_exclusive", "kind_of", "open_regular",
           "read_bounded", "replace_atomically", "replace_together", "target_kind", "unsafe_target", "write_atomic"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class UnsafePathError(OutputPathError):
    """A path tpusim would write is not a regular file: a device node, FIFO, directory, socket or symbolic link."""


class FileRefused(UserError):
    """A file that is not read: not a regular file, larger than its limit, or not openable. ``reason`` says which
    (``"not a regular file (a FIFO)"``), so a caller can put it in a message of its own; ``kind`` is what the path
    is when it is not a regular file (``"a FIFO"``), ``too_large`` whether it exceeds its size limit."""

    def __init__(self, message: str, reason: str, *, kind: str | None = None, too_large: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.kind = kind
        self.too_large = too_large


DIRECTORY = "a directory"


def kind_of(mode: int) -> str | None:
    """What a file of ``mode`` is, as messages name it; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, DIRECTORY),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def target_kind(path: Path) -> str | None:
    """What is at ``path`` when it is not a regular file (a link is not followed); None for a regular file, a
    missing path or one that cannot be examined (the write itself then says why)."""
    try:
        return kind_of(os.lstat(path).st_mode)
    except OSError:
        return None


def unsafe_target(shown: str, kind: str) -> UnsafePathError:
    """The refusal of a write target ``shown`` (``"trace file 'x'"``) that is ``kind`` (``"a FIFO"``)."""
    return UnsafePathError(f"{shown} is {kind}; tpusim writes only regular files and refuses to replace or write "
                           "through anything else; give another path")


def check_target(path: Path, subject: str) -> None:
    """Refuse ``path`` as a write target unless it is missing or a regular file (not followed if a link);
    ``subject`` names it in the message (``"trace file"``)."""
    kind = target_kind(path)
    if kind is not None:
        raise unsafe_target(f"{subject} {str(path)!r}", kind)


def replace_atomically(target: Path, write: Callable[[IO[bytes]], object], subject: str = "file", *,
                       mode: int = 0o666) -> None:
    """Let ``write`` fill a new temporary sibling of ``target``, then move it over ``target``, which must be
    missing or a regular file (else ``UnsafePathError``). A failed write raises its ``OSError`` and leaves
    ``target`` as it was. ``mode`` is the new file's (less the umask): 0o600 keeps it private."""
    check_target(target, subject)
    # a sibling: the same file system, so os.replace is atomic
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with os.fdopen(create_exclusive(temporary, mode), "wb") as handle:
            write(handle)
        check_target(target, subject)  # something else may have taken the name while the file was written
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def replace_together(files: list[tuple[Path, bytes]], subject: str = "file",
                     renamed: Callable[[Path], None] | None = None) -> None:
    """Replace each ``(path, content)`` of ``files``: every new content is written to its temporary sibling first,
    and only then are they renamed over their targets, one right after the other, in order (``renamed`` is told
    of each). Two files cannot change in one step, but a write that fails (a full disk) changes none of them, and
    a kill can only fall between two renames, never while a content is written."""
    temporaries: list[Path] = []
    try:
        for target, content in files:
            check_target(target, subject)
            temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            with os.fdopen(create_exclusive(temporary), "wb") as handle:
                temporaries.append(temporary)
                handle.write(content)
        for (target, _), temporary in zip(files, temporaries, strict=True):
            check_target(target, subject)
            os.replace(temporary, target)
            if renamed is not None:
                renamed(target)
    finally:
        for temporary in temporaries:
            temporary.unlink(missing_ok=True)


def write_atomic(path: Path, text: str, subject: str = "file") -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically (see ``replace_atomically``)."""
    replace_atomically(path, lambda handle: handle.write(text.encode()), subject)


def create_exclusive(path: Path, mode: int = 0o666) -> int:
    """A descriptor of a new regular file at ``path``, opened for writing; ``FileExistsError`` when anything,
    a link included, already has that name."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode)


def open_regular(path: Path, flags: int, subject: str, *, follow: bool, mode: int = 0o644) -> int:
    """A descriptor of the regular file at ``path`` opened with ``flags`` (``O_CREAT`` among them creates it);
    a link (unless ``follow``), a device, FIFO, directory or socket is refused with ``FileRefused`` before
    anything is read or written, as is a path that cannot be opened."""
    shown = f"{subject} {str(path)!r}"
    if not follow:
        try:
            kind = kind_of(os.lstat(path).st_mode)
        except OSError:
            kind = None
        if kind is not None:
            raise FileRefused(f"{shown} is {kind}; valid: a regular file", f"not a regular file ({kind})",
                              kind=kind)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer before it can be refused
        descriptor = os.open(path, flags | _NONBLOCK | _CLOEXEC | (0 if follow else _NOFOLLOW), mode)
    except OSError as error:
        reason = error.strerror or str(error)
        raise FileRefused(f"cannot open {shown}: {reason}", reason) from None
    kind = kind_of(os.fstat(descriptor).st_mode)
    if kind is not None:
        os.close(descriptor)
        raise FileRefused(f"{shown} is {kind}; valid: a regular file", f"not a regular file ({kind})", kind=kind)
    return descriptor


def read_bounded(path: Path, subject: str, limit: str, *, follow: bool) -> bytes:
    """The bytes of the regular file at ``path``, at most the size limit ``limit`` (``tpusim.limits``); anything
    else is ``FileRefused`` (``too_large`` set when the file exceeds the limit)."""
    descriptor = open_regular(path, os.O_RDONLY, subject, follow=follow)
    with os.fdopen(descriptor, "rb") as handle:
        try:
            data = handle.read(limit_of(limit) + 1)
        except OSError as error:
            reason = error.strerror or str(error)
            raise FileRefused(f"cannot read {subject} {str(path)!r}: {reason}", reason) from None
    too_many = exceeds(limit, len(data))
    if too_many is not None:
        reason = f"its size {too_many}"
        raise FileRefused(f"{subject} {str(path)!r} is larger than the limit: {reason}", reason, too_large=True)
    return data

