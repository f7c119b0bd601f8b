"""Fault injection for the failure tests of ``pyg-dynscale train``.

Put this folder on ``PYTHONPATH`` and set ``PYG_DYNSCALE_TEST_FAULT`` to
``"<rank>:<epoch>"``: that rank raises ``RuntimeError("injected fault")`` at
the start of that (1-based) epoch of this process, on torchrun's first attempt only (so a
restart with ``--resume`` recovers). Python imports ``sitecustomize`` at start-up,
so every worker torchrun starts is patched; the package itself is unchanged.
"""
import os

_spec = os.environ.get("PYG_DYNSCALE_TEST_FAULT")
if _spec and os.environ.get("RANK") is not None and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
    _rank, _epoch = (int(v) for v in _spec.split(":"))
    if int(os.environ["RANK"]) == _rank:
        from pyg_dynscale.distributed.trainer import DistributedTrainer

        _original = DistributedTrainer.train_epoch

        def _faulty(self):
            if len(self.epoch_seconds) + 1 == _epoch:
                raise RuntimeError("injected fault")
            return _original(self)

        DistributedTrainer.train_epoch = _faulty
