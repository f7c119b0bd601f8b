"""Typed errors raised at pyg_dynscale's boundaries.

Every error names the offending field and says how to fix it, so that bad input
fails loudly at construction time instead of producing a corrupt result later.
"""
from __future__ import annotations


class DynScaleError(Exception):
    """Base class of all errors raised by pyg_dynscale."""


class FieldError(DynScaleError):
    r"""An error about one named input field, with the fix.

    Args:
        field (str): the offending field or argument, e.g. ``"edge_indices[3]"``.
        problem (str): what is wrong.
        fix (str): how to fix it.
    """

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        msg = f"field '{field}': {problem}"
        if fix:
            msg += f" Fix: {fix}"
        super().__init__(msg)


class SignalValidationError(FieldError, ValueError):
    r"""Raised when the data given to :class:`~pyg_dynscale.data.DynamicGraphSignal`
    is inconsistent (arguments as :class:`FieldError`)."""


class SignalFormatError(DynScaleError, ValueError):
    """Raised when a saved signal file or a dataset file cannot be read."""


class MissingDependencyError(DynScaleError, ImportError):
    """Raised when an optional dependency (e.g. the PyGT extra) is not installed."""

    def __init__(self, package: str, feature: str, install: str) -> None:
        self.package = package
        super().__init__(
            f"{feature} needs the optional package '{package}', which is not installed. "
            f"Install it with: {install}"
        )


class PartitionError(FieldError, ValueError):
    r"""Raised when a partition, a dependency pattern or a partitioner's options
    are invalid (bad number of parts, unknown scheme or model, zero-width rows,
    a partition made for another signal, ...); arguments as :class:`FieldError`."""


class PartitionFormatError(DynScaleError, ValueError):
    """Raised when a saved partition file cannot be read (corrupt, truncated,
    wrong version or not a partition file)."""


class ShardError(PartitionFormatError):
    """Raised when a rank's shard (:func:`pyg_dynscale.distributed.write_shards`)
    cannot be used: a missing rank directory or ``meta.json``, a corrupt or
    truncated file (checksum), another format version, a rank file of another
    write, shards cut for another world size, signal, partition or dependency
    pattern. The message names the file and the cause; under
    :meth:`DistributedTrainer.from_shards
    <pyg_dynscale.distributed.DistributedTrainer.from_shards>` every rank
    raises it, naming the rank that failed."""


class ModelInputError(FieldError, ValueError):
    r"""Raised when a model or runtime gets inconsistent input (an initial state
    of the wrong shape, tensors on different devices, a missing target field);
    arguments as :class:`FieldError`."""


class DecompositionMismatchError(DynScaleError, RuntimeError):
    """Raised when a model's outputs do not match its declared decomposition
    (structure encoder per snapshot, then time encoder per vertex sequence), so
    running it on the fused/decomposed path would silently change its results."""


class UnsupportedModelError(DynScaleError, NotImplementedError):
    """Raised for a model class that has no adapter to the decomposed path."""


class CommandError(DynScaleError):
    """A user-facing error of a ``pyg-dynscale`` subcommand: printed on stderr,
    exit status 2 (:data:`pyg_dynscale.cli.EXIT_USAGE`)."""


class UnsupportedOptionError(DynScaleError, NotImplementedError):
    r"""Raised for a combination of options that a trainer does not implement:
    names the option, the value given and what to use instead. A subclass of
    :class:`NotImplementedError`, so ``except NotImplementedError`` still
    catches it.

    Args:
        option (str): the option as the user spells it, e.g. ``"stream"``.
        problem (str): what is not supported, e.g. ``"is True with path='blackbox'."``.
        instead (str): what to use instead.
    """

    def __init__(self, option: str, problem: str, instead: str) -> None:
        self.option = option
        self.problem = problem
        self.instead = instead
        super().__init__(f"option '{option}' {problem} Use instead: {instead}")


class NonFiniteLossError(DynScaleError, FloatingPointError):
    r"""Raised by a trainer's ``train_epoch()`` when a training batch's loss is
    NaN or infinite: training stops at the epoch that holds the first such
    batch, on every rank alike (the check reads the batch losses the ranks
    already summed, so all ranks raise the same error). A
    :class:`FloatingPointError` too. The trainer's parameters hold the
    non-finite update afterwards: rebuild it (or load a state saved before).

    Args:
        loss (float): the first non-finite batch loss (summed over the ranks).
        epoch (int): the epoch, counted from 1.
        batch (int): the batch of that epoch, counted from 1 (one optimizer
            step; a full-batch trainer has one per epoch).
        batches (int): how many batches the epoch has.
        ranks (tuple): the ranks whose share of that batch's loss was
            non-finite (empty on one process).
        reason (str): ``"lr"`` (the updates diverged: the default) or
            ``"in_degree"`` (a model that divides by in-degrees, PyGT's
            ``DCRNN``, met a vertex with out-edges and no in-edges).
        cause (str): what makes it non-finite, when known.
        fix (str): how to fix it, naming the API's arguments.
    """

    def __init__(self, loss: float, epoch: int, batch: int, batches: int, *, ranks: tuple = (),
                 reason: str = "lr", cause: str = "", fix: str = "") -> None:
        self.loss, self.epoch, self.batch, self.batches = loss, epoch, batch, batches
        self.ranks, self.reason, self.cause, self.fix = tuple(ranks), reason, cause, fix
        where = f"at epoch {epoch}, batch {batch} of {batches}"
        if self.ranks:
            where += f" ({'rank' if len(self.ranks) == 1 else 'ranks'} {', '.join(map(str, self.ranks))})"
        msg = f"the training loss is {loss} {where}."
        if cause:
            msg += f" {cause}"
        if fix:
            msg += f" Fix: {fix}"
        super().__init__(msg)
