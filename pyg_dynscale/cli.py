r"""The ``pyg-dynscale`` command line.

Subcommands live in their own modules (``pyg_dynscale/commands/<name>.py``).
Each module exposes

* ``add_parser(subparsers) -> argparse.ArgumentParser``: registers the
  subcommand and its options;
* ``run(args: argparse.Namespace) -> int``: does the work and returns the
  exit status.

Registering a new subcommand is one line in :data:`COMMANDS`. Modules should
import heavy dependencies inside ``run`` so that ``pyg-dynscale --help`` stays
fast.

Exit status: ``0`` success; ``2`` bad usage or bad input (unreadable path,
unknown or malformed format, invalid options: argparse's convention), with a
one-line message on stderr and no traceback (usage errors too: the line
points to ``--help`` instead of printing the usage); anything else is a bug
and shows its traceback. Set ``PYG_DYNSCALE_DEBUG=1`` to get tracebacks for
input errors too.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn, Optional

from . import __version__
from .errors import CommandError, DynScaleError

#: Subcommand modules, in the order ``--help`` lists them.
COMMANDS: tuple[str, ...] = (
    "pyg_dynscale.commands.inspect",
    "pyg_dynscale.commands.partition",
    "pyg_dynscale.commands.partition_events",
    "pyg_dynscale.commands.train",
    "pyg_dynscale.commands.train_events",
)

#: Exit status for bad usage or bad input.
EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit
    status 2) like every other input error, pointing to ``--help``."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand in :data:`COMMANDS`
    (subparsers are of the same class: one-line usage errors)."""
    parser = OneLineParser(
        prog="pyg-dynscale",
        description="Inspect, partition and train dynamic graphs (snapshot graphs) with pyg_dynscale.",
    )
    parser.add_argument("--version", action="version", version=f"pyg-dynscale {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parser.subcommands = {}  # name -> its parser: unknown arguments are reported by the subcommand's parser
    for name in COMMANDS:
        module = importlib.import_module(name)
        sub = module.add_parser(subparsers)
        sub.set_defaults(_run=module.run)
        parser.subcommands[sub.prog.rsplit(" ", 1)[-1]] = sub
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``pyg-dynscale`` console script."""
    raw = list(sys.argv[1:] if argv is None else argv)
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun worker: first of all, never outlive the launcher
        from .training.failure import die_with_launcher

        die_with_launcher(f"pyg-dynscale {raw[0] if raw else ''}".strip())
    parser = build_parser()
    args, extra = parser.parse_known_args(raw)  # exits with status 2 on bad usage
    if extra:  # as parse_args, but named after the subcommand ("pyg-dynscale train: error: ...")
        getattr(parser, "subcommands", {}).get(args.command, parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    args._argv = raw  # the command line as given (``train --nproc`` relaunches it under torchrun)
    try:
        return int(args._run(args) or 0)
    except (DynScaleError, OSError, ValueError) as exc:
        # Input problems (missing/unreadable file, bad format, invalid option
        # values) are the user's to fix: one clear line, no traceback.
        if os.environ.get("PYG_DYNSCALE_DEBUG"):
            raise
        where = getattr(args, "_rank_label", "")
        from .commands.hints import for_cli  # the API's words -> this subcommand's options (imports re only)

        print(f"pyg-dynscale {args.command}: error{where}: {for_cli(exc, args.command)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
