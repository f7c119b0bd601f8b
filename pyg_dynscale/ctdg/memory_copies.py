r"""The memory copies of :class:`~pyg_dynscale.ctdg.MemoryTrainer` (DistTGL's memory
parallelism :math:`k`) and where the walk over the events stands.

One copy is *live* (in the memory module's buffers, the message stores and the neighbour
loader); the others this process holds (all :math:`k` in the one-process emulation, one
under a process group) wait as snapshots and are swapped in by :meth:`MemoryCopies.activate`.
:attr:`MemoryCopies.train_end` keeps the live copy as the last training epoch left it, so
that evaluation can walk on from it and training come back to it.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..errors import ModelInputError

__all__ = ["MemoryCopies"]


class MemoryCopies:
    r"""Every memory copy this process holds, the live one in the modules' buffers.

    Args:
        state (MemoryState): the memory and its message stores
            (:class:`~pyg_dynscale.ctdg.store.MemoryState`).
        neighbors (LastNeighborLoader): the neighbour loader (host).
        host (HostStream): the stream's index columns (host).
        modules (list): the modules whose training mode follows :meth:`set_training`
            (the memory first; ``None`` entries skipped).
        held (list): the copies this process holds; ``held[0]`` starts live.
        placement (PartitionedMemory, optional): a partitioned memory, whose copy
            :meth:`copy` assembles from every owner.

    Attributes:
        live (int): the copy in the buffers.
        copies (dict or None): copy -> snapshot (``None`` for the live one); ``None`` before
            the first epoch (which starts every copy from zero).
        train_end (dict or None): the live copy at the end of the last training epoch.
        position (str or None): ``"train"`` / ``"val"`` / ``"test"``: where the walk over the events stands.
        training (bool): whether the memory is in training mode (its flush on leaving it).
    """

    def __init__(self, state, neighbors, host, modules: list, held: list, placement=None) -> None:
        self.state, self.neighbors, self.host = state, neighbors, host
        self.modules = [m for m in modules if m is not None]
        self.held = list(held)
        self.placement = placement
        self.live = self.held[0]
        self.copies: Optional[dict] = None
        self.train_end: Optional[dict] = None
        self.position: Optional[str] = None
        self.training = True

    @property
    def started(self) -> bool:
        """Whether a training epoch started the copies (or a checkpoint restored them)."""
        return self.copies is not None

    def set_training(self, mode: bool) -> None:
        """The modules' training mode; leaving it flushes the stored messages (``TGNMemory.train(False)``)."""
        if self.training and not mode:
            self.state.flush()
        # torch.nn.Module.train, not TGNMemory.train: its flush would read the module's own (unused) store
        torch.nn.Module.train(self.modules[0], mode)
        for mod in self.modules[1:]:
            mod.train(mode)
        self.training = mode

    def advance(self, a: int, b: int, training: bool) -> None:
        """The live copy takes the events ``[a, b)`` (memory and neighbour loader)."""
        self.state.update(a, b, training)
        self.neighbors.insert(self.host.src[a:b], self.host.dst[a:b])

    def reset(self) -> None:
        """The live copy from zero: memory, message stores, neighbour loader."""
        self.state.reset()
        self.neighbors.reset_state()

    def snapshot(self) -> dict:
        """The live copy (memory, stores, neighbour loader, training mode), cloned."""
        nb = self.neighbors
        return {"memory": self.state.state(), "neighbors": nb.neighbors.clone(), "e_id": nb.e_id.clone(),
                "cur_e_id": nb.cur_e_id, "training": self.training}

    def restore(self, snap: dict) -> None:
        """Make ``snap`` (:meth:`snapshot`) the live copy's state."""
        self.state.load(snap["memory"])
        nb = self.neighbors
        nb.neighbors.copy_(snap["neighbors"])
        nb.e_id.copy_(snap["e_id"])
        nb.cur_e_id = snap["cur_e_id"]
        self.training = snap["training"]

    def activate(self, copy: int) -> None:
        """Make memory copy ``copy`` the live one (the emulation of ``k > 1``)."""
        if self.live == copy:
            return
        self.copies[self.live] = self.snapshot()
        self.restore(self.copies[copy])
        self.copies[copy] = None
        self.live = copy

    def begin_epoch(self) -> None:
        """Before a training epoch: the first starts every copy from zero; a later one comes back
        to the end of training if evaluation walked the live copy on."""
        if self.copies is None:
            self.set_training(True)
            self.reset()
            zero = self.snapshot()
            self.copies = {c: (None if c == self.live else zero) for c in self.held}
        elif self.position != "train":
            self.restore(self.train_end)
        self.set_training(True)

    def end_epoch(self) -> None:
        """After a training epoch: copy ``held[0]`` live, its state kept as the end of training."""
        self.activate(self.held[0])
        self.train_end = self.snapshot()
        self.position = "train"

    def copy(self, copy: int) -> tuple[Tensor, Tensor]:
        """``(memory [N, d], last_update [N])`` of copy ``copy`` (clones). Partitioned: assembled
        from every owner's rows (a collective under a process group)."""
        if self.placement is not None:
            return self.placement.gather_full()
        if self.copies is None or copy == self.live:
            m = self.state.module
            return m.memory.detach().clone(), m.last_update.clone()
        if copy not in self.copies:
            raise ModelInputError("copy", f"is {copy}: this process holds memory copy {self.live}.",
                                  f"ask for one of {sorted(self.copies)}.")
        snap = self.copies[copy]["memory"]
        return snap["memory"].clone(), snap["last_update"].clone()

    def restart(self) -> None:
        """Forget the copies (a checkpoint saved before the first epoch): the next epoch starts from zero."""
        self.copies, self.train_end, self.position = None, None, None

    def load(self, snaps: dict) -> None:
        """The copies of a checkpoint (copy -> snapshot, every held copy): ``held[0]`` live."""
        self.live = self.held[0]
        self.copies = {}
        for c in self.held:
            if c == self.live:
                self.restore(snaps[c])
                self.copies[c] = None
            else:
                self.copies[c] = snaps[c]
        self.train_end = self.snapshot()
        self.position = "train"

    def saved(self) -> dict:
        """Copy -> snapshot of every held copy as the last training epoch left it (before the
        first epoch: the current buffers, the form a checkpoint loads into)."""
        if self.copies is None:
            now = self.snapshot()
            return {c: now for c in self.held}
        return {c: (self.train_end if c == self.live else snap) for c, snap in self.copies.items()}
