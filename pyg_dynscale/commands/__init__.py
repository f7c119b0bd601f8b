"""Subcommands of the ``pyg-dynscale`` command line (see :mod:`pyg_dynscale.cli`)."""
