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
one-line message on stderr and no traceback; anything else is a bug and
shows its traceback. Set ``PYG_DYNSCALE_DEBUG=1`` to get tracebacks for input
errors too.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Optional

from . import __version__
from .errors import CommandError, DynScaleError

#: Subcommand modules, in the order ``--help`` lists them.
COMMANDS: tuple[str, ...] = (
    "pyg_dynscale.commands.inspect",
    "pyg_dynscale.commands.partition",
    "pyg_dynscale.commands.train",
)

#: Exit status for bad usage or bad input.
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand in :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="pyg-dynscale",
        description="Inspect, partition and train dynamic graphs (snapshot graphs) with pyg_dynscale.",
    )
    parser.add_argument("--version", action="version", version=f"pyg-dynscale {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(name)
        sub = module.add_parser(subparsers)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``pyg-dynscale`` console script."""
    parser = build_parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(raw)  # exits with status 2 on bad usage
    args._argv = raw  # the command line as given (``train --nproc`` relaunches it under torchrun)
    try:
        return int(args._run(args) or 0)
    except (DynScaleError, OSError, ValueError) as exc:
        # Input problems (missing/unreadable file, bad format, invalid option
        # values) are the user's to fix: one clear line, no traceback.
        if os.environ.get("PYG_DYNSCALE_DEBUG"):
            raise
        where = getattr(args, "_rank_label", "")
        print(f"pyg-dynscale {args.command}: error{where}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
