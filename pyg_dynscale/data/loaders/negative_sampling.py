r"""Seeded, vectorized negative sampling for next-snapshot link prediction.

For every snapshot :math:`t` with :math:`n_t` vertices and the set
:math:`P_t` of positive (existing) directed pairs, draw :math:`k_t` distinct
pairs :math:`(u, v)`, :math:`u \neq v`, uniformly from
:math:`\{0..n_t-1\}^2 \setminus P_t`. All snapshots are sampled together:
candidate pairs are drawn for every snapshot at once, rejected if they are a
self-loop, a positive or already drawn, and the rounds repeat only for the
snapshots still short of their quota. Snapshots with
:math:`n_t^2 \le 4(k_t + |P_t|) + 16` are enumerated instead (their cost is
then proportional to the labels produced); in all others at least a quarter
of the :math:`n_t^2` candidate pairs is acceptable at every round, so a round
of :math:`4 k_t + 8` draws almost always fills the quota.
"""
from __future__ import annotations

import numpy as np

_MAX_ROUNDS = 64


def _first_per_group(groups: np.ndarray, quota: np.ndarray) -> np.ndarray:
    """Mask keeping the first ``quota[g]`` entries of each group (groups sorted)."""
    if groups.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    start = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    run = np.diff(np.r_[start, groups.shape[0]])
    rank = np.arange(groups.shape[0]) - np.repeat(start, run)
    return rank < quota[groups]


def sample_negative_pairs(
    num_nodes: np.ndarray,
    num_samples: np.ndarray,
    pos_t: np.ndarray,
    pos_u: np.ndarray,
    pos_v: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Draw negative pairs for all snapshots.

    Args:
        num_nodes: ``[T]`` vertices per snapshot :math:`n_t`.
        num_samples: ``[T]`` requested negatives :math:`k_t` (capped at the
            number of available pairs :math:`n_t(n_t-1) - |P_t \setminus \mathrm{loops}|`).
        pos_t, pos_u, pos_v: ``[P]`` distinct positive pairs (snapshot, local rows).
        rng: the generator (seeded by the caller; results depend only on it).

    Returns:
        ``(t, u, v)`` of the negatives, grouped by snapshot in ascending order.
    """
    T = num_nodes.shape[0]
    n = num_nodes.astype(np.int64)
    nmax = max(int(n.max()) if T else 0, 1)
    off = np.zeros(T + 1, dtype=np.int64)
    np.cumsum(n, out=off[1:])
    if int(off[-1]) * nmax >= 2**62:
        raise OverflowError("too many vertex-time nodes for 64-bit pair keys in negative sampling")

    def key(t: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return (off[t] + u) * nmax + v

    non_loop = pos_u != pos_v
    pos_key = np.sort(key(pos_t[non_loop], pos_u[non_loop], pos_v[non_loop]))
    pos_count = np.bincount(pos_t[non_loop], minlength=T)
    capacity = n * (n - 1) - pos_count
    k = np.minimum(num_samples.astype(np.int64), np.maximum(capacity, 0))

    out_t, out_u, out_v = [], [], []
    dense = np.flatnonzero((k > 0) & (n * n <= 4 * (k + pos_count) + 16))
    for t in dense:  # loop over (few, small) dense snapshots only
        nt = int(n[t])
        uu, vv = np.divmod(np.arange(nt * nt, dtype=np.int64), nt)
        tt = np.full(uu.shape[0], t, dtype=np.int64)
        free = (uu != vv) & ~np.isin(key(tt, uu, vv), pos_key, assume_unique=False)
        cand = np.flatnonzero(free)
        pick = np.sort(rng.choice(cand.shape[0], size=int(k[t]), replace=False))
        out_t.append(tt[cand[pick]])
        out_u.append(uu[cand[pick]])
        out_v.append(vv[cand[pick]])

    need = k.copy()
    need[dense] = 0
    taken_keys = np.zeros(0, dtype=np.int64)
    rounds = 0
    while need.sum() > 0:
        rounds += 1
        if rounds > _MAX_ROUNDS:  # pragma: no cover - acceptance >= 1/4 per draw makes this unreachable
            raise RuntimeError("negative sampling did not converge; lower negative_ratio")
        ts = np.flatnonzero(need > 0)
        m = 4 * need[ts] + 8
        t = np.repeat(ts, m)
        nt = n[t]
        u = np.floor(rng.random(t.shape[0]) * nt).astype(np.int64)
        v = np.floor(rng.random(t.shape[0]) * nt).astype(np.int64)
        kk = key(t, u, v)
        ok = (u != v) & ~np.isin(kk, pos_key) & ~np.isin(kk, taken_keys)
        t, u, v, kk = t[ok], u[ok], v[ok], kk[ok]
        _, first = np.unique(kk, return_index=True)  # drop repeats, keep draw order
        first.sort()
        t, u, v, kk = t[first], u[first], v[first], kk[first]
        keep = _first_per_group(t, need)
        t, u, v, kk = t[keep], u[keep], v[keep], kk[keep]
        need -= np.bincount(t, minlength=T)
        taken_keys = np.sort(np.concatenate([taken_keys, kk]))
        out_t.append(t)
        out_u.append(u)
        out_v.append(v)

    if not out_t:
        z = np.zeros(0, dtype=np.int64)
        return z, z.copy(), z.copy()
    t = np.concatenate(out_t)
    u = np.concatenate(out_u)
    v = np.concatenate(out_v)
    order = np.argsort(t, kind="stable")
    return t[order], u[order], v[order]
