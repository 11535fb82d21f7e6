"""Entry point: builds the parser from the command modules, dispatches, and turns errors into exit codes.

Start-up loads only the names and help lines of the commands (``COMMANDS``): a command's module, and the request
models its flags are built from, are imported once the command line names it, so ``--version``, ``--help`` and a
mistyped command load no simulation code. Each handler in turn imports the simulation layers, plotting, dataframes
or cluster libraries it runs on, so a command loads only what it uses (tests/architecture/test_lazy_imports.py).

Conventions (docs/results.md#command-line-conventions): with ``--json`` stdout carries exactly one JSON object; notes
and progress go to stderr. Exit 0 success, 1 internal error, 2 user error (one line naming the bad value and what is
valid, optionally a suggestion line; no traceback unless ``--debug``), 3 a validation that ran and failed; 128 + the
signal's number when SIGINT (130) or SIGTERM (143) ended the command (``engine.signals``: even mid-simulation).
Output that cannot be written is a user error too (exit 2, one line): a closed stdout is refused before any work,
a full one (``> /dev/full``, a file size limit) is named when it fails, and a disk cache entry that could not be
written is named after the result (which stands).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Sequence
from importlib import import_module
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tpusim import __version__
from tpusim.cli.common import UsageError, note
from tpusim.engine.signals import Interrupted, interrupts_raised
from tpusim.errors import OutputPathError, TpusimError, UserError, bounded

COMMANDS = MappingProxyType({
    "list": ("listing", "list hardware profiles, collectives, ..."),
    "collective": ("collective", "simulate one collective over a logical mesh axis"),
    "gemm": ("gemm", "simulate one distributed GeMM"),
    "step": ("step", "simulate one training step"),
    "tune": ("tune", "search mesh shape, dataflows, transposition and slice counts"),
    "plan": ("plan", "rank the best configuration of every algorithm and layout kind"),
    "run": ("run", "run every point of an experiment file"),
    "schema": ("run", "print the JSON Schema of experiment files"),
    "reproduce": ("reproduce", "run a paper-reproduction family and draw its figure"),
    "validate": ("reproduce", "reference numbers next to simulated ones; exit 3 on a miss"),
    "summarize": ("summarize", "summarize a trace: exposed communication, overlap, critical path"),
})
"""Each command's module in ``tpusim.cli`` (whose ``COMMANDS`` gives the command its flags) and its help line."""
_OUTPUT_FULL = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EBADF})
"""Why a write to stdout fails when its reader is not gone (that is EPIPE) but its file is full or unwritable."""


class OutputError(UserError):
    """Standard output cannot be written (closed, full, over a file size limit)."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


if TYPE_CHECKING:
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _SubParsers = argparse._SubParsersAction


class _Commands(_SubParsers):
    """The subcommands, each given its flags when the command line chooses it (or ``command_parser`` asks)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unfilled = set(COMMANDS)

    def filled(self, name: str) -> argparse.ArgumentParser:
        parser = self.choices[name]
        if name in self.unfilled:
            self.unfilled.remove(name)
            import_module(f"tpusim.cli.{COMMANDS[name][0]}").COMMANDS[name](parser)
        return parser

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        self.filled(values[0])  # argparse has checked that it names a command
        super().__call__(parser, namespace, values, option_string)


def _print_traceback() -> None:
    import traceback  # only with --debug: a command that succeeds never needs it

    traceback.print_exc()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tpusim", description="Discrete-event simulator of TPUv4 torus clusters.")
    parser.add_argument("--version", action="version", version=f"tpusim {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser.add_argument("--cache", type=Path, metavar="DIR",
                        help="keep a disk timing cache in DIR (default: memory only; or set TPUSIM_CACHE_DIR)")
    sub = parser.add_subparsers(action=_Commands, dest="command", required=True, parser_class=_Parser)
    for name, (_, help_line) in COMMANDS.items():
        sub.add_parser(name, help=help_line)
    return parser


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser of one command with all its flags, as the command line builds it."""
    (commands,) = [action for action in build_parser()._actions if isinstance(action, _Commands)]
    return commands.filled(name)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list
    try:
        if sys.stdout is None:  # started with stdout closed (`>&-`): every result would be lost
            raise OutputError("standard output is closed; give it a file or /dev/null (e.g. '> out.txt')")
        with interrupts_raised():
            args = build_parser().parse_args(args_list)
            from tpusim.engine.context import Context  # after parsing: --version and --help need no cache

            args.context = Context.with_cache(args.cache)
            status = int(args.handler(args) or 0)
        sys.stdout.flush()  # a full stdout fails here, while it can still be said in one line
        if args.context.timings.ignored is not None:
            note(args.context.timings.ignored)
        failure = args.context.timings.write_failure
        if failure is not None:
            raise OutputPathError(failure)
        return status
    except TpusimError as error:
        if debug:
            _print_traceback()
        for line in error.lines():
            print(line, file=sys.stderr)
        return error.exit_code
    except Interrupted as interrupt:
        print(f"interrupted by {interrupt.name}", file=sys.stderr)
        return interrupt.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`tpusim schema | head -1`): what it read was all it wanted, so exit quietly;
        # stdout is pointed at devnull so that the interpreter's final flush does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as error:
        if error.filename is not None or error.errno not in _OUTPUT_FULL:
            return _internal(error, debug)
        # a write without a file name is a write to stdout: stdout goes to devnull so that the interpreter's final
        # flush of what is still buffered does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"cannot write the output to stdout: {error.strerror or error}", file=sys.stderr)
        return OutputError.exit_code
    except Exception as error:
        return _internal(error, debug)


def _internal(error: Exception, debug: bool) -> int:
    """An internal error: said in one line, the traceback only on request."""
    if debug:
        _print_traceback()
    print(bounded(f"internal error: {type(error).__name__}: {error} (rerun with --debug for a traceback)"),
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
