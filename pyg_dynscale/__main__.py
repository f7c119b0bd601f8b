"""``python -m pyg_dynscale`` is the ``pyg-dynscale`` command."""
import sys

from .cli import main

sys.exit(main())
