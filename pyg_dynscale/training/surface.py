r"""The one surface of every trainer (``FusedTrainer``, ``DistributedTrainer``,
``WindowTrainer``, ``MemoryTrainer``): what a user learns once.

* construction: ``Trainer(model, data[, partition], *, loss=, optimizer=, lr=,
  seed=, device=, ...)`` -- the model and the data positionally, everything
  else by keyword (:func:`~.options.build_optimizer` reads ``optimizer``);
* :meth:`BaseTrainer.train_epoch` ``-> float``, the epoch's training loss;
* :meth:`BaseTrainer.evaluate` ``-> dict[str, float]`` (:class:`Metrics`,
  names from :data:`METRIC_NAMES`);
* :meth:`BaseTrainer.traffic` ``-> TrafficReport``
  (:class:`~.traffic.TrafficReport`);
* :meth:`BaseTrainer.state_dict` / :meth:`BaseTrainer.load_state_dict`: a
  trainer rebuilt from the same arguments and loaded continues bit for bit;
* :meth:`BaseTrainer.close` and ``with Trainer(...) as trainer:``.

Unsupported combinations raise
:class:`~pyg_dynscale.errors.UnsupportedOptionError`.
"""
from __future__ import annotations

import warnings
from typing import Any

__all__ = ["BaseTrainer", "Metrics", "METRIC_NAMES"]

#: the metric names :meth:`BaseTrainer.evaluate` reports (each trainer the ones
#: that apply to its task; a trainer may add its own, e.g. ``rmse``)
METRIC_NAMES = ("loss", "mse", "mae", "auc", "ap", "mrr")


class Metrics(dict):
    r"""What :meth:`BaseTrainer.evaluate` returns: ``{metric name: float}``.

    ``float(metrics)`` and a numeric format (``f"{metrics:.4f}"``) are the
    deprecated spellings of ``metrics["loss"]`` (the snapshot trainers returned
    the loss as a float before 0.2): they warn and use ``metrics["loss"]``.
    """

    def __float__(self) -> float:
        warnings.warn("evaluate() returns a dict of metrics; float(trainer.evaluate()) is deprecated: "
                      "use trainer.evaluate()['loss'].", DeprecationWarning, stacklevel=2)
        return float(self["loss"])

    def __format__(self, spec: str) -> str:
        if not spec:  # f"{metrics}": the dict
            return str(self)
        warnings.warn(f"evaluate() returns a dict of metrics; formatting it with {spec!r} is deprecated: "
                      f"use trainer.evaluate()['loss'].", DeprecationWarning, stacklevel=2)
        return format(float(self["loss"]), spec)


class BaseTrainer:
    r"""The base class of the four trainers: the context manager and
    :meth:`close`. Subclasses implement :meth:`train_epoch`, :meth:`evaluate`,
    :meth:`traffic`, :meth:`state_dict` and :meth:`load_state_dict`, and
    override :meth:`_release` for what they hold (process groups, threads,
    ``DistributedDataParallel`` wrappers).
    """

    _closed: bool = False

    def train_epoch(self) -> float:  # pragma: no cover - every trainer implements it
        """One training epoch; returns its training loss."""
        raise NotImplementedError

    def evaluate(self, *args: Any, **kwargs: Any) -> Metrics:  # pragma: no cover
        """Metrics of held-out data (the test split, or the data given)."""
        raise NotImplementedError

    def traffic(self) -> Any:  # pragma: no cover
        """Bytes of the last epoch: a :class:`~.traffic.TrafficReport`."""
        raise NotImplementedError

    def state_dict(self) -> dict:  # pragma: no cover
        """Everything a rebuilt trainer needs to continue bit for bit."""
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:  # pragma: no cover
        """Restore :meth:`state_dict`'s output into a trainer built from the same arguments."""
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran: the trainer cannot train or evaluate any more."""
        return self._closed

    def close(self) -> None:
        """Release what the trainer holds (process-group wrappers, threads,
        services) while the process group still exists; idempotent. The
        trainer cannot train afterwards."""
        if self._closed:
            return
        self._closed = True
        self._release()

    def _release(self) -> None:
        """What :meth:`close` releases; nothing by default."""

    def __enter__(self) -> "BaseTrainer":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False
