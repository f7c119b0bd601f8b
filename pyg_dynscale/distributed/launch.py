"""Deprecated: moved to :mod:`pyg_dynscale.training.launch` (this path imports that module itself for one release)."""
import sys
import warnings

from ..training import launch as _moved

warnings.warn("pyg_dynscale.distributed.launch moved to pyg_dynscale.training.launch; import it from there (the old path works for one "
              "release).", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved  # the module itself, not a copy: patching it patches what the package uses
