r"""A partition: an owner array over vertex-time nodes (docs/design.md, "Owner arrays")."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Union

import torch
from torch import Tensor

from ..errors import PartitionError
# the scheme names are defined torch-free there: the command line's parser reads them without importing torch
from ..names import SCHEMES

if TYPE_CHECKING:  # pragma: no cover
    from ..data.signal import DynamicGraphSignal
    from ..data.supergraph import Supergraph


def check_num_parts(num_parts: int, num_nodes: int) -> int:
    """Validate ``num_parts`` against the number of vertex-time nodes."""
    if isinstance(num_parts, bool) or not isinstance(num_parts, int):
        raise PartitionError("num_parts", f"must be an int, got {type(num_parts).__name__}.")
    if num_parts < 1:
        raise PartitionError("num_parts", f"must be >= 1, got {num_parts}.", "Ask for at least one part.")
    if num_parts > num_nodes:
        raise PartitionError(
            "num_parts", f"{num_parts} parts but only {num_nodes} vertex-time nodes: some ranks would own nothing.",
            f"Use at most {num_nodes} parts.",
        )
    return num_parts


@dataclass
class Partition:
    r"""Which rank owns each vertex-time node :math:`(i,t)` (gid order, DGC Eq. 1).

    Args:
        scheme (str): ``"pss"``, ``"pts"``, ``"pss-ts"``, ``"pgc"``, ...
        num_parts (int): number of ranks :math:`R`.
        owner (Tensor): ``[N]`` int64 rank running the structure encoder of each
            node (and the time encoder unless ``time_owner`` is given).
        time_owner (Tensor, optional): ``[N]`` rank running the time encoder
            (PSS-TS); ``None`` means ``owner``.
        chunk (Tensor, optional): ``[N]`` chunk id for chunk-based schemes.
        fingerprint (str): ``DynamicGraphSignal.fingerprint()`` of the signal
            the partition was made for (``""``: unknown).
        seconds (float): partitioning wall time.
        meta (dict): scheme-specific details (JSON-like: str/int/float/bool/lists).
    """

    scheme: str
    num_parts: int
    owner: Tensor
    time_owner: Optional[Tensor] = None
    chunk: Optional[Tensor] = None
    fingerprint: str = ""
    seconds: float = 0.0
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.owner = torch.as_tensor(self.owner, dtype=torch.long)
        if self.time_owner is not None:
            self.time_owner = torch.as_tensor(self.time_owner, dtype=torch.long)
        if self.chunk is not None:
            self.chunk = torch.as_tensor(self.chunk, dtype=torch.long)
        self.validate()

    @property
    def num_nodes(self) -> int:
        return self.owner.numel()

    @property
    def temporal_owner(self) -> Tensor:
        """``time_owner`` if set, else ``owner``."""
        return self.owner if self.time_owner is None else self.time_owner

    def validate(self, num_nodes: Optional[int] = None) -> None:
        """Check shapes and ranges; with ``num_nodes``, also the length.

        Raises:
            PartitionError: naming the offending attribute.
        """
        if isinstance(self.num_parts, bool) or not isinstance(self.num_parts, int) or self.num_parts < 1:
            raise PartitionError("num_parts", f"must be an int >= 1, got {self.num_parts!r}.")
        n = self.owner.numel() if num_nodes is None else int(num_nodes)
        for name in ("owner", "time_owner", "chunk"):
            t = getattr(self, name)
            if t is None:
                continue
            if t.dim() != 1 or t.numel() != n:
                raise PartitionError(name, f"must have shape [{n}] (one entry per vertex-time node), got {list(t.shape)}.",
                                     "Make the partition for this signal.")
            if name != "chunk" and t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.num_parts):
                raise PartitionError(name, f"ranks must lie in [0, {self.num_parts}), got [{int(t.min())}, {int(t.max())}].")
            if name == "chunk" and t.numel() and int(t.min()) < 0:
                raise PartitionError("chunk", "chunk ids must be >= 0.")

    def check_signal(self, signal: Union["DynamicGraphSignal", "Supergraph"]) -> None:
        """Raise :class:`PartitionError` if this partition does not fit ``signal``
        (node count, and fingerprint when both are known)."""
        n = signal.num_nodes if hasattr(signal, "spatial_edge_index") else signal.num_vertex_time_nodes
        self.validate(n)
        if self.fingerprint and hasattr(signal, "fingerprint"):
            fp = signal.fingerprint()  # a supergraph answers with its signal's ("" when unknown)
            if fp and fp != self.fingerprint:
                raise PartitionError("fingerprint", f"partition was made for signal {self.fingerprint[:12]}..., "
                                     f"not this one ({fp[:12]}...).", "Re-partition this signal.")

    def counts(self, time: bool = False) -> Tensor:
        """``[R]`` vertex-time nodes per rank (of ``time_owner`` with ``time=True``)."""
        o = self.temporal_owner if time else self.owner
        return torch.bincount(o, minlength=self.num_parts)

    def to(self, device: Union[str, torch.device]) -> "Partition":
        mv = (lambda t: None if t is None else t.to(device))
        return Partition(self.scheme, self.num_parts, self.owner.to(device), mv(self.time_owner), mv(self.chunk),
                         self.fingerprint, self.seconds, dict(self.meta))

    def __repr__(self) -> str:
        extra = ", time_owner" if self.time_owner is not None else ""
        extra += f", chunks={int(self.chunk.max()) + 1 if self.chunk is not None and self.chunk.numel() else 0}" if self.chunk is not None else ""
        return f"Partition(scheme={self.scheme!r}, num_parts={self.num_parts}, nodes={self.num_nodes}{extra}, seconds={self.seconds:.3f})"
