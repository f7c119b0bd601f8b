"""Event data: JODIE CSV and edge-list readers, the chronological split, the generator, bad input."""
import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from pyg_dynscale.ctdg import (
    TGN,
    MemoryTrainer,
    chronological_split,
    load_event_list,
    load_jodie_csv,
    split_ranges,
    synthetic_events,
)
from pyg_dynscale.data.loaders import DatasetFormatError
from pyg_dynscale.errors import ModelInputError

COLLEGE = Path("/work/shared/datasets/snap/CollegeMsg.txt")
HEADER = "user_id,item_id,timestamp,state_label,comma_separated_list_of_features\n"
ROWS = ["0,0,0.0,0,0.5,-1.0\n", "1,0,36.0,0,0.25,2.0\n", "0,2,77.0,1,1.0,0.0\n", "2,1,77.0,0,-3.5,4.0\n"]


def _write(tmp_path, text, name="events.csv", crlf=False, gz=False):
    data = text.replace("\n", "\r\n") if crlf else text
    path = tmp_path / name
    path.write_bytes(gzip.compress(data.encode()) if gz else data.encode())
    return path


@pytest.mark.parametrize("header,crlf,gz", [(True, False, False), (False, True, False), (True, True, True)])
def test_jodie_csv_is_read_as_pyg_jodie_dataset_builds_it(tmp_path, header, crlf, gz):
    d = load_jodie_csv(_write(tmp_path, (HEADER if header else "") + "".join(ROWS), crlf=crlf, gz=gz))
    assert d.src.tolist() == [0, 1, 0, 2]
    assert d.dst.tolist() == [3, 3, 5, 4]  # items shifted by max(user) + 1 = 3, as JODIEDataset
    assert d.t.tolist() == [0, 36, 77, 77] and d.t.dtype == torch.long
    assert d.y.tolist() == [0, 0, 1, 0]
    assert d.msg.dtype == torch.float32
    assert torch.equal(d.msg, torch.tensor([[0.5, -1.0], [0.25, 2.0], [1.0, 0.0], [-3.5, 4.0]]))
    assert d.num_nodes == 6


def test_jodie_csv_without_features_trains(tmp_path):
    rows = "".join(f"{u},{i},{t},0\n" for u, i, t in zip([0, 1, 2, 0, 1, 2] * 10, [0, 1] * 30, range(60)))
    d = load_jodie_csv(_write(tmp_path, HEADER + rows))
    assert d.msg.shape == (60, 0)
    model = TGN(d.num_nodes, 0, memory_dim=8, time_dim=4, embedding_dim=8)  # PyG's TGNMemory alone fails on 0 columns
    loss = MemoryTrainer(model, d, batch_size=10).train_epoch()
    assert np.isfinite(loss)


@pytest.mark.parametrize("text,pattern", [
    (HEADER + ROWS[0] + ROWS[2] + ROWS[1], r"line 4.*earlier than the previous.*sort"),
    (HEADER + ROWS[0] + "1,0,36.0,0,0.25\n", r"line 3.*fields.*line 2"),      # feature width mismatch
    (HEADER + ROWS[0] + "1,x,36.0,0,0.25,2.0\n", r"line 3, column 1 \(item\).*'x'"),
    (ROWS[0] + "-1,0,36.0,0,0.25,2.0\n", r"line 2, column 0 \(user\).*>= 0"),
    ("", r"no data lines"),
    (HEADER, r"is a header line and no events"),
    ("0,1,2\n", r"3 fields"),
])
def test_jodie_csv_bad_input_names_the_line(tmp_path, text, pattern):
    with pytest.raises(DatasetFormatError, match=pattern):
        load_jodie_csv(_write(tmp_path, text))


def test_unsorted_jodie_csv_sorted_on_request(tmp_path):
    d = load_jodie_csv(_write(tmp_path, HEADER + ROWS[2] + ROWS[0] + ROWS[1]), sort=True)
    assert d.t.tolist() == [0, 36, 77]


@pytest.mark.skipif(not COLLEGE.exists(), reason="shared CollegeMsg not present")
def test_collegemsg_as_events():
    d = load_event_list(COLLEGE)
    assert d.num_events == 59835 and d.num_nodes == 1899 and d.msg.shape == (59835, 0)
    assert bool((d.t[1:] >= d.t[:-1]).all()) and int(d.t[0]) == 1082040961
    assert d.vertex_map[d.src[0]] == 1 and d.vertex_map[d.dst[0]] == 2  # first line "1 2 1082040961"


def test_event_list_sorts_and_remaps(tmp_path):
    path = _write(tmp_path, "% comment\n10 20 5\n20 30 3\n10 30 3.7\n", name="e.txt")
    d = load_event_list(path)
    assert d.t.tolist() == [3, 3, 5]  # stable by time; 3.7 floored
    assert d.vertex_map[d.src].tolist() == [20, 10, 10] and d.vertex_map[d.dst].tolist() == [30, 30, 20]
    with pytest.raises(DatasetFormatError, match="line 3"):
        load_event_list(path, sort=False)


def test_split_equals_pyg_train_val_test_split():
    d = synthetic_events(1000, 100, seed=3)
    for ratios in ((0.15, 0.15), (0.1, 0.3), (0.0, 0.2)):
        ours, theirs = chronological_split(d, *ratios), d.train_val_test_split(*ratios)
        for a, b in zip(ours, theirs):
            assert torch.equal(a.src, b.src) and torch.equal(a.t, b.t)
    a, b, e = split_ranges(d)
    assert d.t[a - 1] < d.t[a] and d.t[b - 1] < d.t[b] and e == 1000  # one timestamp never straddles two parts


def test_synthetic_events_are_seeded_bipartite_and_bursty():
    d = synthetic_events(5000, 200, msg_dim=3, seed=1, burst_fraction=0.4, burst_length=50)
    again = synthetic_events(5000, 200, msg_dim=3, seed=1, burst_fraction=0.4, burst_length=50)
    assert all(torch.equal(getattr(d, k), getattr(again, k)) for k in ("src", "dst", "t", "msg"))
    assert not torch.equal(d.src, synthetic_events(5000, 200, msg_dim=3, seed=2).src)
    assert int(d.src.max()) < 100 <= int(d.dst.min()) and d.msg.shape == (5000, 3)
    assert bool((d.t[1:] >= d.t[:-1]).all())
    runs = (d.src[1:] == d.src[:-1]).float().mean()
    calm = synthetic_events(5000, 200, msg_dim=3, seed=1, burst_fraction=0.0)
    assert runs > 0.3 > (calm.src[1:] == calm.src[:-1]).float().mean()
    mixed = synthetic_events(2000, 50, bipartite=False, seed=0)
    assert int(mixed.dst.min()) < 25 and int(mixed.src.max()) >= 25


def test_trainer_refuses_bad_events():
    d = synthetic_events(300, 40, msg_dim=2, seed=0)
    model = TGN(d.num_nodes, 2, memory_dim=8, time_dim=4, embedding_dim=8)
    bad = d.clone()
    bad.t = bad.t.flip(0)
    with pytest.raises(ModelInputError, match=r"data\.t.*decreases"):
        MemoryTrainer(model, bad)
    bad = d.clone()
    bad.dst[5] = d.num_nodes
    with pytest.raises(ModelInputError, match=r"data\.dst.*event 5.*num_nodes"):
        MemoryTrainer(model, bad)
    bad = d.clone()
    bad.src[7] = -1
    with pytest.raises(ModelInputError, match=r"data\.src.*-1"):
        MemoryTrainer(model, bad)
    bad = d.clone()
    bad.msg = bad.msg[:, :1]
    with pytest.raises(ModelInputError, match=r"data\.msg.*1 columns.*2"):
        MemoryTrainer(model, bad)
    with pytest.raises(ModelInputError, match="parallelism"):
        MemoryTrainer(model, d, parallelism=(0, 1, 1))
    with pytest.raises(ModelInputError, match="batch_size"):
        MemoryTrainer(model, d, batch_size=0)
    with pytest.raises(ModelInputError, match="split"):
        MemoryTrainer(model, d).evaluate("train")
    with pytest.raises(NotImplementedError, match="negatives.*'historical'"):
        MemoryTrainer(model, d, negatives="historical")
    with pytest.raises(ModelInputError, match="memory"):
        MemoryTrainer(memory=torch.nn.Linear(2, 2), gnn=model.gnn, link_pred=model.link_pred, data=d)
