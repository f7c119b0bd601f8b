"""Distributed training on ``torch.distributed`` (DGC's decomposed path).

:class:`DistributedTrainer` executes a partition's
:class:`~pyg_dynscale.partition.CommunicationPlan`: halo exchanges inside the
structure encoder, recurrent states across ranks in rounds, attention rows
merged in time order, PSS-TS redistribution, global BatchNorm statistics and
loss normalizers, and a gradient all-reduce.

The plumbing every trainer family shares lives in :mod:`pyg_dynscale.training`
and is re-exported here: :func:`spawn` runs ``N`` local gloo processes (tests,
notebooks; production jobs use ``torchrun``, e.g. ``pyg-dynscale train``);
:func:`save_checkpoint` / :func:`load_checkpoint` write and restore training
state with :mod:`torch.distributed.checkpoint`. The modules' old places
(``pyg_dynscale.distributed.checkpoint``, ``.launch``, ``.failure``,
``.groups``) keep importing for one release, with a :class:`DeprecationWarning`:
they are the modules of :mod:`pyg_dynscale.training` themselves (``groups`` is
:mod:`pyg_dynscale.training.ranks`).
"""
import importlib as _importlib
import importlib.abc as _abc
import importlib.util as _util
import sys as _sys
import warnings as _warnings

from ..training.checkpoint import CheckpointMismatchError, latest_checkpoint, load_checkpoint, save_checkpoint
from ..training.launch import SpawnError, free_port, spawn
from .exchange import Communicator
from .local import RankLayout
from .trainer import FUSION_MODES, DistributedTrainer

__all__ = ["DistributedTrainer", "FUSION_MODES", "Communicator", "RankLayout", "spawn", "SpawnError", "free_port",
           "save_checkpoint", "load_checkpoint", "latest_checkpoint", "CheckpointMismatchError"]

#: modules that moved to the training layer: old name -> new module
MOVED = {"checkpoint": "pyg_dynscale.training.checkpoint", "launch": "pyg_dynscale.training.launch",
         "failure": "pyg_dynscale.training.failure", "groups": "pyg_dynscale.training.ranks"}


_SPECS: dict = {}


class _MovedModules(_abc.MetaPathFinder, _abc.Loader):
    """Imports ``pyg_dynscale.distributed.<old>`` as the moved module itself
    (not a copy: patching ``pyg_dynscale.distributed.launch.mp`` patches what
    :func:`spawn` uses), with a :class:`DeprecationWarning` naming the new place."""

    def find_spec(self, fullname, path=None, target=None):
        head, _, name = fullname.rpartition(".")
        if head != __name__ or name not in MOVED:
            return None
        return _util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = MOVED[spec.name.rpartition(".")[2]]
        _warnings.warn(f"{spec.name} moved to {new}; import it from there (the old path works for one release).",
                       DeprecationWarning, stacklevel=2)
        module = _importlib.import_module(new)
        _SPECS[spec.name] = module.__spec__  # importlib sets the old name's spec on it: restored in exec_module
        return module

    def exec_module(self, module) -> None:
        """The moved module is already executed: only its own spec is put back."""
        module.__spec__ = _SPECS.pop(module.__spec__.name, module.__spec__)


if not any(isinstance(f, _MovedModules) for f in _sys.meta_path):
    _sys.meta_path.append(_MovedModules())
