r"""Checkpoint state of :class:`~pyg_dynscale.ctdg.trainer.MemoryTrainer`: what a resumed run
needs besides modules and optimizer (every memory copy as it was at the end of the last
training epoch, the random generators, the byte counters; with a partitioned placement each
owner's rows and the partition) as the flat ``{key: Tensor}`` that
:func:`~pyg_dynscale.distributed.checkpoint.save_checkpoint` writes, and back.

**Across devices.** A CUDA run also saves its CUDA generator (``rank<r>/cuda_rng``: the
attention dropout draws from it with parallelism ``(1, 1, 1)`` and no prefetcher); a CPU run
has none. :meth:`StreamState.device_rng_keys` names such keys, so that a loader asks the
checkpoint only for those it holds (:func:`pyg_dynscale.commands.events_checkpoint.stream_template`):
a CUDA checkpoint resumes on the CPU (the CPU generator, restored, is all a CPU run draws
from) and a CPU checkpoint on CUDA (the CUDA generator is then seeded with
:math:`f(\text{seed}, \text{epoch})`, the trainer's per-step seed function at step and trainer
:math:`-1`: deterministic, but not the draws an uninterrupted CUDA run would make -- those
never equal a CPU run's anyway). Everything else is device-independent: host tensors, or
device tensors that load onto any device.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..errors import ModelInputError

__all__ = ["StreamState"]


def _flat_snapshot(prefix: str, snap: dict) -> dict:
    """A memory copy's snapshot (:meth:`~pyg_dynscale.ctdg.trainer.MemoryTrainer._snapshot`)
    as ``{prefix + key: Tensor}`` (clones)."""
    mem = snap["memory"]
    out = {"memory": mem["memory"], "last_update": mem["last_update"], "neighbors": snap["neighbors"],
           "e_id": snap["e_id"], "cur_e_id": torch.tensor(int(snap["cur_e_id"]), dtype=torch.long),
           "training": torch.tensor(bool(snap["training"]))}
    for d in ("s", "d"):
        for name, x in zip(("order", "lo", "hi"), mem[d]):
            out[f"store_{d}/{name}"] = x
    return {prefix + key: x.detach().clone() for key, x in out.items()}


def _unflat_snapshot(prefix: str, state: dict) -> dict:
    """The inverse of :func:`_flat_snapshot`."""
    g = lambda key: state[prefix + key]  # noqa: E731
    return {"memory": {"memory": g("memory"), "last_update": g("last_update"),
                       "s": tuple(g(f"store_s/{n}") for n in ("order", "lo", "hi")),
                       "d": tuple(g(f"store_d/{n}") for n in ("order", "lo", "hi"))},
            "neighbors": g("neighbors"), "e_id": g("e_id"), "cur_e_id": int(g("cur_e_id")),
            "training": bool(g("training"))}


class StreamState:
    """The checkpoint methods of :class:`~pyg_dynscale.ctdg.trainer.MemoryTrainer` (a mixin:
    they read and set the trainer's memory copies ``_copies`` / ``_live`` / ``_train_end``,
    ``epoch``, ``_traffic`` and ``placement``)."""

    @property
    def modules(self) -> torch.nn.ModuleDict:
        """The trained modules in one container (``memory``, ``gnn``, ``link_pred``, ``static``
        if any): their FQNs name the optimizer's state in :meth:`state_dict` and in a checkpoint."""
        mods = {"memory": self.memory, "gnn": self.gnn, "link_pred": self.link_pred}
        if self.static is not None:
            mods["static"] = self.static
        return torch.nn.ModuleDict(mods)

    def stream_state(self) -> dict:
        r"""What a resumed run needs besides modules and optimizer, at an epoch
        boundary: a flat ``{key: Tensor}`` (the form
        :func:`~pyg_dynscale.distributed.checkpoint.save_checkpoint` writes).

        * ``copy<c>/...``: every memory copy this process holds, as it was at
          the end of the last training epoch (``memory [N, d]``,
          ``last_update [N]``, both message stores' ``order [E]``, ``lo [N]``,
          ``hi [N]``, the neighbour loader's ``neighbors [N, size]``,
          ``e_id [N, size]``, ``cur_e_id``); before the first epoch (which
          starts every copy from zero) the current buffers, with
          ``rank<r>/started`` false. The ranks of one memory copy hold the
          same copy: a checkpoint writes it once.
        * ``rank<r>/epoch``, ``rank<r>/rng`` (the global generator the next
          epoch's negatives and, with ``(1, 1, 1)``, its dropout draw from;
          evaluation re-seeds it, so it is taken after any evaluation),
          ``rank<r>/traffic`` (the byte counters); on CUDA ``rank<r>/cuda_rng``
          (:meth:`device_rng_keys`; see the module docstring for a checkpoint
          resumed on another device).
        * Partitioned placements: each rank's own rows as
          ``copy<c>/owner<r>/memory [n_r, d]`` and ``.../last_update [n_r]``
          (every owner writes its part), and the partition, ``copy<c>/owner [N]``.
        """
        r = self.rank
        t = self._traffic
        out = {f"rank{r}/epoch": torch.tensor(self.epoch, dtype=torch.long),
               f"rank{r}/started": torch.tensor(self._copies is not None),
               f"rank{r}/rng": torch.get_rng_state(),
               f"rank{r}/traffic": torch.tensor([t.memory_read, t.memory_write, t.gather, t.gradients, t.setup],
                                                dtype=torch.long)}
        out.update(self._device_rng())
        if self._copies is not None:
            for c, snap in self._copies.items():
                out.update(_flat_snapshot(f"copy{c}/", self._train_end if c == self._live else snap))
        else:  # the form a checkpoint loads into
            now = self._snapshot()
            for c in self._held():
                out.update(_flat_snapshot(f"copy{c}/", now))
        return self._owner_keys(out, f"owner{r}/") if self.placement is not None else out

    def _owner_keys(self, state: dict, owner: str) -> dict:
        """Partitioned: ``copy<c>/memory`` / ``last_update`` (this rank's rows) under ``copy<c>/<owner>``
        (``owner = "owner<r>/"``), the partition as ``copy<c>/owner``; ``owner = ""`` maps back."""
        out = {}
        for key, x in state.items():
            head, _, tail = key.partition("/")
            if head.startswith("copy") and tail in ("memory", "last_update", f"owner{self.rank}/memory",
                                                    f"owner{self.rank}/last_update"):
                key = f"{head}/{owner}{tail.rpartition('/')[2]}"
                if owner:
                    out[f"{head}/owner"] = self.placement.owner.cpu().clone()
            out[key] = x
        return out

    def _device_rng(self) -> dict:
        """The states of the device generators this trainer draws from besides the CPU one:
        ``{"rank<r>/cuda_rng": state}`` on CUDA, ``{}`` on the CPU."""
        if self.device.type == "cuda":
            return {f"rank{self.rank}/cuda_rng": torch.cuda.get_rng_state(self.device)}
        return {}

    def device_rng_keys(self) -> list:
        """The keys of :meth:`stream_state` that only a run on this kind of device writes (a
        checkpoint written on another device lacks them, or has others): a loader takes them
        from the checkpoint only where it holds them."""
        return list(self._device_rng())

    def _set_device_rng(self, state: Optional[Tensor]) -> None:
        """Restore the CUDA generator from ``state``, or (``None``: the checkpoint was written on
        another device) seed it with the trainer's seed function of ``(seed, epoch, -1, -1)``."""
        gen = torch.cuda.default_generators[self.device.index if self.device.index is not None else 0]
        if state is not None:
            gen.set_state(state.cpu())
        else:
            gen.manual_seed(self._rng_seed(-1, -1))

    def _held(self) -> list:
        """The memory copies this process holds (all ``k`` in the emulation)."""
        i, j, k = self.parallelism
        return list(range(k)) if self.world_size == 1 else [self.rank // (i * j)]

    def load_stream_state(self, state: dict) -> None:
        """Restore what :meth:`stream_state` returned (this process's keys; modules and
        optimizer are restored separately, before). The next :meth:`train_epoch` then draws
        and computes what the saved trainer's next epoch would have, bit for bit."""
        r = self.rank
        if self.placement is not None:
            for key in [k for k in state if k.startswith("copy") and k.endswith("/owner")]:
                if not torch.equal(state[key].cpu(), self.placement.owner.cpu()):
                    raise ModelInputError("partition", "differs from the checkpoint's.",
                                          "resume with the partition (owner tensor) the checkpoint was written with.")
            state = self._owner_keys(state, "")
        for key in (f"rank{r}/epoch", f"rank{r}/started", f"rank{r}/rng", f"rank{r}/traffic"):
            if key not in state:
                raise ModelInputError("state", f"lacks {key!r}.", "give what MemoryTrainer.stream_state() returned "
                                      "on a trainer with the same parallelism and world size.")
        held = self._held()
        have = sorted(int(key[4:-7]) for key in state if key.startswith("copy") and key.endswith("/memory"))
        if have != held:
            raise ModelInputError("state", f"holds memory copies {have}, this trainer {held}.",
                                  "resume with the same parallelism and world size.")
        self.epoch = int(state[f"rank{r}/epoch"])
        torch.set_rng_state(state[f"rank{r}/rng"].cpu())
        for key in self.device_rng_keys():  # a device generator; a checkpoint of another device lacks it
            self._set_device_rng(state.get(key))
        tr = [int(v) for v in state[f"rank{r}/traffic"]]
        t = self._traffic
        t.memory_read, t.memory_write, t.gather, t.gradients, t.setup = tr
        if not bool(state[f"rank{r}/started"]):  # saved before the first epoch: it starts every copy from zero
            self._copies, self._train_end, self._position = None, None, None
            return
        live = held[0] if self.world_size == 1 else self._live
        self._live = live
        self._copies = {}
        for c in held:
            snap = _unflat_snapshot(f"copy{c}/", state)
            if c == live:
                self._restore(snap)
                self._copies[c] = None
            else:
                self._copies[c] = snap
        self._train_end = self._snapshot()
        self._position = "train"

    def state_dict(self) -> dict:
        """Everything a resumed run needs at an epoch boundary: ``{"modules": ..., "optimizer":
        ..., "stream": stream_state()}`` (see :meth:`stream_state`)."""
        return {"modules": self.modules.state_dict(), "optimizer": self.optimizer.state_dict(),
                "stream": self.stream_state()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (of a trainer built with the same modules, data, parallelism
        and world size)."""
        for key in ("modules", "optimizer", "stream"):
            if key not in state:
                raise ModelInputError("state", f"lacks {key!r}.", "give what MemoryTrainer.state_dict() returned.")
        self.modules.load_state_dict(state["modules"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.load_stream_state(state["stream"])
