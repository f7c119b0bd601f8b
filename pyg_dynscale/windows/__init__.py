r"""Windowed training (PyGT's index-batching workflow): sliding windows over
one signal without copies (:class:`WindowView`), and :class:`WindowTrainer`.
See ``docs/windows.md``.

.. code-block:: python

    from pyg_dynscale.windows import WindowTrainer

    trainer = WindowTrainer(model, signal, lags=12, horizon=1, batch_size=64)
    loss = trainer.train_epoch()
    trainer.evaluate(split="test")   # {"mse": ..., "mae": ..., "rmse": ...}
"""
from .batching import block_batches
from .trainer import OPTIMIZERS, WindowTrainer
from .view import SPLITS, Standardizer, Window, WindowView, series_signal

__all__ = ["WindowTrainer", "WindowView", "Window", "Standardizer", "SPLITS", "OPTIMIZERS", "block_batches",
           "series_signal"]
