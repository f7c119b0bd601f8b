r"""Windowed training (PyGT's index-batching workflow): sliding windows over
one signal without copies (:class:`WindowView`), the held snapshots
(:class:`SnapshotStore`), and :class:`WindowTrainer`. See ``docs/windows.md``.

.. code-block:: python

    from pyg_dynscale.windows import WindowTrainer

    with WindowTrainer(model, signal, lags=12, horizon=1, batch_size=64) as trainer:
        loss = trainer.train_epoch()
        trainer.evaluate()    # the test split: {"loss": ..., "mse": ..., "mae": ..., "rmse": ...}
"""
from .batching import block_batches
from .snapshot_store import SnapshotStore, StoreLayout
from .trainer import OPTIMIZERS, WindowTrainer
from .view import SPLITS, Standardizer, Window, WindowView, series_signal

__all__ = ["WindowTrainer", "WindowView", "Window", "Standardizer", "SnapshotStore", "StoreLayout", "SPLITS",
           "OPTIMIZERS", "block_batches", "series_signal"]
