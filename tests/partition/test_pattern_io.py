"""DependencyPattern presets/validation and Partition save/load."""
from __future__ import annotations

import pickle

import pytest
import torch

from tests.helpers.signals import make_dynamic_signal
from pyg_dynscale.errors import PartitionError, PartitionFormatError
from pyg_dynscale.partition import BlockPattern, DependencyPattern, Partition, load_partition, partition, save_partition


def test_presets_widths():
    t = DependencyPattern.preset("tgcn", 4, 8)
    assert t.blocks == (BlockPattern((4,), "recurrent", 8, 24),)
    t2 = DependencyPattern.preset("T-GCN", 4, 8, gcn_layers=2, num_blocks=2)
    assert t2.blocks[0].spatial_widths == (4, 24) and t2.blocks[1].spatial_widths == (8, 24)
    m = DependencyPattern.preset("mpnnlstm", 4, 8)
    assert m.blocks[0] == BlockPattern((4, 8), "recurrent", 32, 16)
    # DGC's MPNN-LSTM: a later block takes the concatenated GCN outputs, 2 * hidden wide
    m2 = DependencyPattern.preset("mpnnlstm", 4, 8, num_blocks=3)
    assert m2.blocks == (BlockPattern((4, 8), "recurrent", 32, 16),) + (BlockPattern((16, 8), "recurrent", 32, 16),) * 2
    assert m2.blocks[1].input_width == 16
    # PyGT's MPNN-LSTM: the LSTMs run inside one snapshot (time kind "none"); the
    # structure output [H_1 || H_2 || X] (2 * hidden + in) is the next block's input
    p = DependencyPattern.preset("mpnnlstm-pygt", 4, 8)
    assert p.name == "mpnnlstmpygt" and p.blocks == (BlockPattern((4, 8), "none", 0, 20),)
    assert p.blocks[0].redistribution_width == 20 and p.blocks[0].input_width == 4
    for alias in ("MPNN-LSTM-PyGT", "mpnnlstm_pygt", "mpnnlstmpygt"):
        assert DependencyPattern.preset(alias, 4, 8) == p
    p2 = DependencyPattern.preset("mpnnlstm-pygt", 4, 8, num_blocks=2)
    assert p2.blocks[1] == BlockPattern((20, 8), "none", 0, 36)
    assert p.temporal_edge_weight() == 0.0 and p.temporal_edge_weight(attention_rows=3.0) == 0.0
    assert p.spatial_edge_weight() == 2 * 4 * 8 and p.spatial_edge_weight("exchange") == 2 * 4 * (4 + 8)
    assert p2.spatial_edge_weight() == 2 * 4 * (8 + 20 + 8)
    d = DependencyPattern.preset("dysat", 4, 8, gat_layers=2)
    assert d.blocks[0] == BlockPattern((4, 8), "attention", 8, 8)
    g = DependencyPattern.preset("gconvgru", 4, 8, K=3)
    assert g.blocks[0] == BlockPattern((20, 20), "recurrent", 8, 8) and g.blocks[0].spatial_hops == 2
    assert DependencyPattern.preset("gconvgru", 4, 8, K=1).blocks[0].spatial_hops == 0
    # edge weights: bytes per epoch (fwd + bwd) per cut edge; block 0's first
    # layer moves raw features, loaded once ("load", the default): not counted
    assert t2.static_input_width == 4
    assert t2.spatial_edge_weight() == t2.spatial_edge_weight("load") == 2 * 4 * (24 + 8 + 24)
    assert t2.spatial_edge_weight("exchange") == 2 * 4 * (4 + 24 + 8 + 24)
    # PyGT's one-layer T-GCN / a one-block one-layer DySAT exchange nothing else spatially
    assert t.static_input_width == 4 and t.spatial_edge_weight() == 0.0 and t.spatial_edge_weight("exchange") == 2 * 4 * 4
    assert d.spatial_edge_weight() == 2 * 4 * 8 and DependencyPattern.preset("dysat", 4, 8).spatial_edge_weight() == 0.0
    assert DependencyPattern.preset("dysat", 4, 8, num_blocks=2).spatial_edge_weight() == 2 * 4 * 8
    # block 0 without a spatial layer: nothing is static
    g1 = DependencyPattern((BlockPattern((), "recurrent", 8), BlockPattern((5,), "recurrent", 8)))
    assert g1.static_input_width == 0 and g1.spatial_edge_weight() == g1.spatial_edge_weight("exchange") == 2 * 4 * 5
    with pytest.raises(PartitionError, match="input_halo"):
        t2.spatial_edge_weight("once")
    assert t2.temporal_edge_weight() == 2 * 4 * (8 + 8)
    assert DependencyPattern.from_dict(t2.to_dict()) == t2
    d2 = DependencyPattern.preset("dysat", 4, 8)
    assert d2.temporal_edge_weight() == 2 * 4 * 8
    assert d2.temporal_edge_weight(attention_rows=5.0) == 2 * 4 * 8 * 5
    assert t2.temporal_edge_weight(attention_rows=5.0) == t2.temporal_edge_weight()  # recurrent: unaffected
    with pytest.raises(PartitionError, match="attention_rows"):
        d2.temporal_edge_weight(attention_rows=0)


def test_time_kind_none_round_trip_and_validation():
    none = BlockPattern((4, 8), "none", 0, 20)
    mixed = DependencyPattern((none, BlockPattern((20,), "recurrent", 8), BlockPattern((), "none", 0, 6)), 2, "mixed-none")
    d = mixed.to_dict()
    assert d["blocks"][0] == {"spatial_widths": [4, 8], "time_kind": "none", "time_width": 0, "output_width": 20}
    assert d["blocks"][2] == {"spatial_widths": [], "time_kind": "none", "time_width": 0, "output_width": 6}
    back = DependencyPattern.from_dict(d)
    assert back == mixed and back.blocks[0].time_kind == "none" and back.blocks[2].redistribution_width == 6
    pygt = DependencyPattern.preset("mpnnlstm-pygt", 3, 5, num_blocks=2)
    assert DependencyPattern.from_dict(pygt.to_dict()) == pygt
    assert mixed.temporal_edge_weight() == 2 * 2 * 8  # only the recurrent block
    with pytest.raises(PartitionError, match="time_width"):
        BlockPattern((4,), "none", 3)
    with pytest.raises(PartitionError, match="output_width"):
        BlockPattern((), "none", 0)  # no spatial layer, nothing to redistribute
    with pytest.raises(PartitionError, match="time_width"):
        BlockPattern((4,), "recurrent", 0)  # only "none" has no time row


def test_pattern_errors():
    with pytest.raises(PartitionError, match="model.*tgcn.*mpnnlstm.*dysat.*gconvgru"):
        DependencyPattern.preset("gat", 4, 8)
    with pytest.raises(PartitionError, match="spatial_widths\\[1\\]"):
        BlockPattern((4, 0), "recurrent", 8)
    with pytest.raises(PartitionError, match="time_width"):
        BlockPattern((4,), "recurrent", -1)
    with pytest.raises(PartitionError, match="time_kind"):
        BlockPattern((4,), "lstm", 3)
    with pytest.raises(PartitionError, match="hidden"):
        DependencyPattern.preset("tgcn", 4, 0)
    with pytest.raises(PartitionError, match="blocks"):
        DependencyPattern(())
    with pytest.raises(PartitionError, match="bytes_per_element"):
        DependencyPattern((BlockPattern((1,), "recurrent", 1),), 0)


def test_save_load_roundtrip(tmp_path):
    sig = make_dynamic_signal(seed=1)
    for scheme in ("pss", "pss-ts"):
        p = partition(sig, scheme, 2, balanced=True)
        p.chunk = torch.arange(p.num_nodes) % 3
        f = tmp_path / f"{scheme}.pt"
        save_partition(p, str(f))
        q = load_partition(str(f), signal=sig)
        assert q.scheme == p.scheme and q.num_parts == 2 and q.fingerprint == sig.fingerprint()
        assert torch.equal(q.owner, p.owner) and torch.equal(q.chunk, p.chunk)
        assert (q.time_owner is None) == (p.time_owner is None)
        if p.time_owner is not None:
            assert torch.equal(q.time_owner, p.time_owner)
        assert q.meta == p.meta and q.seconds == p.seconds


def test_load_errors(tmp_path):
    sig = make_dynamic_signal(seed=1)
    other = make_dynamic_signal(seed=2)
    p = partition(sig, "pts", 2)
    f = tmp_path / "p.pt"
    save_partition(p, str(f))
    with pytest.raises(PartitionError, match="fingerprint|owner"):
        load_partition(str(f), signal=other)
    data = f.read_bytes()
    (tmp_path / "trunc.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(PartitionFormatError, match="not a readable"):
        load_partition(str(tmp_path / "trunc.pt"))
    # tensors altered after saving -> checksum mismatch
    payload = torch.load(str(f), weights_only=True)
    payload["tensors"]["owner"] = 1 - payload["tensors"]["owner"]
    torch.save(payload, str(tmp_path / "bad.pt"))
    with pytest.raises(PartitionFormatError, match="checksum"):
        load_partition(str(tmp_path / "bad.pt"))
    payload["version"] = 99
    torch.save(payload, str(tmp_path / "v.pt"))
    with pytest.raises(PartitionFormatError, match="version"):
        load_partition(str(tmp_path / "v.pt"))
    torch.save({"x": torch.zeros(1)}, str(tmp_path / "other.pt"))
    with pytest.raises(PartitionFormatError, match="format tag"):
        load_partition(str(tmp_path / "other.pt"))

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with open(tmp_path / "evil.pt", "wb") as fh:
        pickle.dump({"format": "pyg_dynscale.Partition", "obj": Evil()}, fh)
    with pytest.raises(PartitionFormatError):
        load_partition(str(tmp_path / "evil.pt"))
    bad = Partition("x", 2, torch.tensor([0, 1]), meta={"f": object()})
    with pytest.raises(PartitionError, match="meta"):
        save_partition(bad, str(tmp_path / "m.pt"))
