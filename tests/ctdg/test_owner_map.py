"""OwnerMap: both kinds against a brute-force dict, and typed errors on bad input."""
import pytest
import torch

from pyg_dynscale.ctdg.owner_map import OWNER_MAP_KINDS, OwnerMap
from pyg_dynscale.errors import ModelInputError


def brute(owner, num_parts):
    """{global id: (owner, local id)} with local ids in increasing global id per part."""
    seen = [0] * num_parts
    out = {}
    for v, p in enumerate(owner.tolist()):
        out[v] = (p, seen[p])
        seen[p] += 1
    return out, seen


def owners(seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 200, (1,), generator=g))
    m = int(torch.randint(1, 7, (1,), generator=g))
    if seed % 3 == 0:  # interval-like: contiguous runs, some parts empty
        cuts = torch.sort(torch.randint(0, n + 1, (m - 1,), generator=g)).values
        owner = torch.bucketize(torch.arange(n), cuts, right=True)
    else:
        owner = torch.randint(0, max(m - 1, 1), (n,), generator=g)  # the last part stays empty
    return owner, m


@pytest.mark.parametrize("kind", OWNER_MAP_KINDS)
@pytest.mark.parametrize("seed", range(12))
def test_agrees_with_brute_force(kind, seed):
    owner, m = owners(seed)
    ref, counts = brute(owner, m)
    om = OwnerMap(owner, m, kind=kind)
    n = owner.numel()
    g = torch.Generator().manual_seed(100 + seed)
    ids = torch.randint(0, n, (3 * n,), generator=g)  # repeats, any order
    assert om.owner_of(ids).tolist() == [ref[v][0] for v in ids.tolist()]
    assert om.local_of(ids).tolist() == [ref[v][1] for v in ids.tolist()]
    assert om.local_of(ids).dtype == torch.long and om.owner_of(ids).dtype == torch.long
    assert om.local_of(ids.view(3, n)).shape == (3, n)
    for p in range(m):
        mine = [v for v in range(n) if ref[v][0] == p]
        assert om.owned(p).tolist() == mine
        assert om.num_owned(p) == counts[p] == len(mine)
        # rows 0..n_p-1 in increasing global id
        assert om.local_of(om.owned(p)).tolist() == list(range(len(mine)))
    assert om.owner is not None and torch.equal(om.owner, owner)
    assert om.local_of(torch.zeros(0, dtype=torch.long)).numel() == 0


def test_kinds_agree_on_a_large_irregular_partition():
    g = torch.Generator().manual_seed(0)
    owner = torch.randint(0, 5, (50_000,), generator=g)
    owner[10_000:20_000] = 3  # a run
    a, b = OwnerMap(owner, 8, "dense"), OwnerMap(owner, 8, "hash")
    ids = torch.randint(0, 50_000, (20_000,), generator=g)
    assert torch.equal(a.local_of(ids), b.local_of(ids))
    assert torch.equal(a.owner_of(ids), b.owner_of(ids))
    assert a.num_owned(7) == 0 and a.owned(7).numel() == 0


def test_int32_owner_is_accepted():
    om = OwnerMap(torch.tensor([1, 0, 1], dtype=torch.int32), 2)
    assert om.owner.dtype == torch.long
    assert om.local_of(torch.tensor([0, 1, 2], dtype=torch.int32)).tolist() == [0, 0, 1]


@pytest.mark.parametrize("owner, num_parts, kind, field", [
    (torch.tensor([0, 2, 1]), 2, "dense", "owner"),          # rank >= num_parts
    (torch.tensor([0, -1]), 2, "hash", "owner"),            # negative
    (torch.tensor([[0, 1]]), 2, "dense", "owner"),          # not 1-D
    (torch.tensor([0.0, 1.0]), 2, "dense", "owner"),        # float
    (torch.tensor([True, False]), 2, "dense", "owner"),     # bool
    ([0, 1], 2, "dense", "owner"),                          # not a tensor
    (torch.tensor([0, 1]), 0, "dense", "num_parts"),
    (torch.tensor([0, 1]), True, "dense", "num_parts"),
    (torch.tensor([0, 1]), 2, "sparse", "kind"),
])
def test_bad_input_is_a_typed_error(owner, num_parts, kind, field):
    with pytest.raises(ModelInputError) as err:
        OwnerMap(owner, num_parts, kind)
    assert err.value.field == field
    assert field in str(err.value) and "Fix:" in str(err.value)


@pytest.mark.parametrize("kind", OWNER_MAP_KINDS)
def test_bad_lookups_are_typed_errors(kind):
    om = OwnerMap(torch.tensor([0, 1, 1]), 2, kind)
    for bad in (torch.tensor([3]), torch.tensor([-1]), torch.tensor([0.5]), [0]):
        with pytest.raises(ModelInputError, match="ids"):
            om.local_of(bad)
        with pytest.raises(ModelInputError, match="ids"):
            om.owner_of(bad)
    for bad in (2, -1, 1.0):
        with pytest.raises(ModelInputError, match="part"):
            om.owned(bad)
        with pytest.raises(ModelInputError, match="part"):
            om.num_owned(bad)
