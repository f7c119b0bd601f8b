"""Versioned files are read without unpickling, and a file holding other
Python objects is refused without passing on torch's advice to load it with
``weights_only=False`` (which would unpickle an untrusted file)."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.errors import PartitionFormatError, SignalFormatError
from pyg_dynscale.partition import load_partition


class _Thing:
    pass


@pytest.mark.parametrize("loader,error", [(DynamicGraphSignal.load, SignalFormatError),
                                          (load_partition, PartitionFormatError)])
def test_a_pickle_of_other_objects_is_refused_without_unsafe_advice(tmp_path, loader, error):
    path = tmp_path / "evil.pt"
    torch.save({"format": "x", "thing": _Thing()}, path)
    with pytest.raises(error) as info:
        loader(str(path))
    msg = str(info.value)
    assert "weights_only" not in msg and "not unpickled" in msg


def test_a_corrupt_file_names_the_cause(tmp_path):
    path = tmp_path / "cut.pt"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(SignalFormatError, match="not a readable pyg_dynscale"):
        DynamicGraphSignal.load(str(path))
