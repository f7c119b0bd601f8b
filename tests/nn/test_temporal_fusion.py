"""Masked temporal fusion (DGC §5.1.2): packing, masked scans and encoders must
equal per-sequence processing exactly (outputs and gradients, float64)."""
from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from pyg_dynscale.errors import SignalValidationError, UnsupportedOptionError
from pyg_dynscale.nn.temporal_fusion import (
    ATTENTION_STRATEGIES,
    RECURRENT_STRATEGIES,
    MaskedGRU,
    MaskedLSTM,
    MaskedTemporalAttention,
    masked_recurrent_scan,
    pack_sequences,
)

DT = torch.float64
TOL = dict(atol=1e-12, rtol=1e-10)


def ptr_of(lengths) -> torch.Tensor:
    lengths = torch.as_tensor(lengths, dtype=torch.long)
    return torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])


LENGTH_CASES = {
    "mixed": [3, 1, 5, 2, 4, 1, 1, 5, 2, 7, 1, 3],
    "with_empty": [2, 0, 4, 1, 0, 3],
    "one_sequence": [6],
    "one_step": [1],
    "all_length_one": [1] * 9,
    "random": torch.randint(1, 9, (40,), generator=torch.Generator().manual_seed(3)).tolist(),
}


# ----------------------------------------------------------------- packing
def reference_ffd(lengths: list[int], L: int) -> list[list[int]]:
    """Item-by-item first-fit decreasing: the bins' item lists."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable
    bins: list[list[int]] = []
    caps: list[int] = []
    for i in order:
        if lengths[i] == 0:
            continue
        for b, c in enumerate(caps):
            if c >= lengths[i]:
                bins[b].append(i)
                caps[b] -= lengths[i]
                break
        else:
            bins.append([i])
            caps.append(L - lengths[i])
    return bins


@pytest.mark.parametrize("seed", range(6))
def test_pack_sequences_is_first_fit_decreasing(seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 12, (int(torch.randint(1, 60, (1,), generator=g)),), generator=g)
    # skewed lengths: many short, few long
    lengths = torch.where(torch.rand(lengths.shape, generator=g) < 0.7, lengths % 3, lengths)
    L = int(lengths.max()) + int(seed % 3) if int(lengths.max()) > 0 else 1
    p = pack_sequences(ptr_of(lengths), row_len=L)
    expected = reference_ffd(lengths.tolist(), L)
    got = []
    for r in range(p.num_rows):  # rows hold the sequences in placement order
        seqs = p.seq_id[r][p.reset[r]].tolist()
        got.append(seqs)
    assert sorted(map(tuple, got)) == sorted(map(tuple, expected))
    assert p.num_rows == len(expected)


def test_packing_invariants_and_roundtrip():
    lengths = [3, 0, 1, 5, 2, 2, 4, 1]
    ptr = ptr_of(lengths)
    p = pack_sequences(ptr)
    M = int(ptr[-1])
    assert p.row_len == 5 and p.num_elements == M and p.num_sequences == len(lengths)
    g = p.gather[p.gather >= 0]
    assert sorted(g.tolist()) == list(range(M))
    assert p.padded_elements == p.num_rows * p.row_len - M
    # reset exactly at each sequence's first element, positions within sequences
    flat_pos = torch.full((M,), -1)
    flat_pos[p.gather[p.gather >= 0]] = p.position[p.gather >= 0]
    expect_pos = torch.cat([torch.arange(n) for n in lengths])
    assert torch.equal(flat_pos, expect_pos)
    assert torch.equal(p.reset, p.position == 0)
    # padding only at row ends, rows sorted by fill, active rows a prefix
    assert torch.equal(p.gather >= 0, torch.arange(p.row_len) < p.row_fill.unsqueeze(1))
    assert bool((p.row_fill[1:] <= p.row_fill[:-1]).all())
    assert torch.equal(p.active, (p.gather >= 0).sum(0))
    x = torch.randn(M, 3, dtype=DT)
    packed = p.pack(x)
    assert packed.shape == (p.num_rows, p.row_len, 3)
    assert torch.equal(p.unpack(packed), x)
    assert torch.equal(packed[p.gather < 0], torch.zeros(p.padded_elements, 3, dtype=DT))
    # time-major layout is a permutation
    assert torch.equal(torch.sort(p.time_major).values, torch.arange(M))
    assert torch.equal(p.time_major[p.time_major_inv], torch.arange(M))


def test_packing_bad_input():
    with pytest.raises(SignalValidationError, match="row_len"):
        pack_sequences(ptr_of([3, 5]), row_len=4)
    with pytest.raises(SignalValidationError, match="seq_ptr"):
        pack_sequences(torch.tensor([1, 3]))
    with pytest.raises(SignalValidationError, match="seq_ptr"):
        pack_sequences(torch.tensor([0, 3, 2]))
    with pytest.raises(SignalValidationError, match="seq_ptr"):
        pack_sequences(torch.tensor([0.0, 2.0]))
    p = pack_sequences(ptr_of([2, 2]))
    with pytest.raises(SignalValidationError, match="rows"):
        p.pack(torch.zeros(3, 2))


# ------------------------------------------------------------- recurrent
def per_sequence_rnn(ref: nn.Module, x, ptr, h0, c0=None):
    outs = []
    for s in range(ptr.numel() - 1):
        a, b = int(ptr[s]), int(ptr[s + 1])
        if b == a:
            continue
        hx = h0[s].view(1, 1, -1) if c0 is None else (h0[s].view(1, 1, -1), c0[s].view(1, 1, -1))
        outs.append(ref(x[a:b].unsqueeze(0), hx)[0][0])
    return torch.cat(outs) if outs else x.new_zeros(0, ref.hidden_size)


def grads(loss, tensors, retain=False):
    return torch.autograd.grad(loss, tensors, allow_unused=True, retain_graph=retain)


@pytest.mark.parametrize("strategy", RECURRENT_STRATEGIES)
@pytest.mark.parametrize("case", list(LENGTH_CASES))
def test_masked_gru_equals_per_sequence(strategy, case):
    torch.manual_seed(0)
    lengths = LENGTH_CASES[case]
    ptr = ptr_of(lengths)
    M, S, D, H = int(ptr[-1]), len(lengths), 3, 4
    gru = MaskedGRU(D, H, strategy=strategy).to(DT)
    ref = nn.GRU(D, H, batch_first=True).to(DT)
    ref.load_state_dict(gru.state_dict())  # same parameter names and shapes as torch.nn.GRU
    x = torch.randn(M, D, dtype=DT, requires_grad=True)
    h0 = torch.randn(S, H, dtype=DT, requires_grad=True)
    out, hn = gru(x, ptr, h0, return_state=True)
    expect = per_sequence_rnn(ref, x, ptr, h0)
    torch.testing.assert_close(out, expect, **TOL)
    w = torch.randn_like(out)
    wn = torch.randn_like(hn)
    got_g = grads((out * w).sum() + (hn * wn).sum(), [x, h0, *gru.parameters()])
    # reference h_n: the state after each sequence's last element (h0 for empty ones)
    flat_last = {}
    pos = 0
    for s, n in enumerate(lengths):
        if n:
            pos += n
            flat_last[s] = pos - 1
    ref_hn = torch.stack([expect[flat_last[s]] if s in flat_last else h0[s] for s in range(S)])
    exp_g = grads((expect * w).sum() + (ref_hn * wn).sum(), [x, h0, *ref.parameters()])
    for a, b in zip(got_g, exp_g):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("strategy", RECURRENT_STRATEGIES)
@pytest.mark.parametrize("case", ["mixed", "with_empty", "one_step", "random"])
def test_masked_lstm_equals_per_sequence(strategy, case):
    torch.manual_seed(1)
    lengths = LENGTH_CASES[case]
    ptr = ptr_of(lengths)
    M, S, D, H = int(ptr[-1]), len(lengths), 2, 3
    lstm = MaskedLSTM(D, H, strategy=strategy).to(DT)
    ref = nn.LSTM(D, H, batch_first=True).to(DT)
    ref.load_state_dict(lstm.state_dict())
    x = torch.randn(M, D, dtype=DT, requires_grad=True)
    h0 = torch.randn(S, H, dtype=DT, requires_grad=True)
    c0 = torch.randn(S, H, dtype=DT, requires_grad=True)
    out = lstm(x, ptr, (h0, c0))
    expect = per_sequence_rnn(ref, x, ptr, h0, c0)
    torch.testing.assert_close(out, expect, **TOL)
    w = torch.randn_like(out)
    for a, b in zip(grads((out * w).sum(), [x, h0, c0, *lstm.parameters()]),
                    grads((expect * w).sum(), [x, h0, c0, *ref.parameters()])):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("strategy", ["padding", "pack_padded"])
def test_masked_lstm_final_state_from_an_unpacked_strategy_is_an_unsupported_option(strategy):
    lstm = MaskedLSTM(2, 3, strategy=strategy).to(DT)
    x, ptr = torch.randn(5, 2, dtype=DT), ptr_of([2, 3])
    with pytest.raises(UnsupportedOptionError, match=r"option 'return_state' .*" + strategy + r".*packed_rows") as err:
        lstm(x, ptr, return_state=True)
    assert isinstance(err.value, NotImplementedError)
    assert lstm(x, ptr).shape == (5, 3)  # without return_state the strategy runs


def test_masked_lstm_last_states():
    torch.manual_seed(2)
    lengths = [2, 0, 3]
    ptr = ptr_of(lengths)
    lstm = MaskedLSTM(2, 3).to(DT)
    ref = nn.LSTM(2, 3, batch_first=True).to(DT)
    ref.load_state_dict(lstm.state_dict())
    x = torch.randn(5, 2, dtype=DT)
    h0, c0 = torch.randn(3, 3, dtype=DT), torch.randn(3, 3, dtype=DT)
    out, (hn, cn) = lstm(x, ptr, (h0, c0), return_state=True)
    for s, (a, b) in enumerate([(0, 2), (2, 2), (2, 5)]):
        if a == b:
            torch.testing.assert_close(hn[s], h0[s]); torch.testing.assert_close(cn[s], c0[s])
            continue
        _, (rh, rc) = ref(x[a:b].unsqueeze(0), (h0[s].view(1, 1, -1), c0[s].view(1, 1, -1)))
        torch.testing.assert_close(hn[s], rh[0, 0], **TOL)
        torch.testing.assert_close(cn[s], rc[0, 0], **TOL)


def test_default_initial_state_is_zero_and_packing_reusable():
    torch.manual_seed(3)
    ptr = ptr_of([4, 1, 2])
    p = pack_sequences(ptr)
    gru = MaskedGRU(3, 5).to(DT)
    x = torch.randn(7, 3, dtype=DT)
    a = gru(x, p)
    b = gru(x, ptr, torch.zeros(3, 5, dtype=DT))
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    torch.testing.assert_close(gru(x, p), a, atol=0, rtol=0)  # packing reused


def test_masked_recurrent_scan_generic_cell():
    torch.manual_seed(4)
    lengths = LENGTH_CASES["random"]
    ptr = ptr_of(lengths)
    cell = nn.GRUCell(3, 4).to(DT)
    x = torch.randn(int(ptr[-1]), 3, dtype=DT, requires_grad=True)
    h0 = torch.randn(len(lengths), 4, dtype=DT, requires_grad=True)
    out = masked_recurrent_scan(cell, x, ptr, h0)
    rows = []
    for s in range(len(lengths)):
        h = h0[s:s + 1]
        for i in range(int(ptr[s]), int(ptr[s + 1])):
            h = cell(x[i:i + 1], h)
            rows.append(h)
    expect = torch.cat(rows)
    torch.testing.assert_close(out, expect, **TOL)
    w = torch.randn_like(out)
    for a, b in zip(grads((out * w).sum(), [x, h0, *cell.parameters()]), grads((expect * w).sum(), [x, h0, *cell.parameters()])):
        torch.testing.assert_close(a, b, **TOL)
    # h0=None -> zeros, hidden size from the cell
    z = masked_recurrent_scan(cell, x, ptr)
    torch.testing.assert_close(z, masked_recurrent_scan(cell, x, ptr, torch.zeros_like(h0)), atol=0, rtol=0)
    with pytest.raises(SignalValidationError, match="hidden_size"):
        masked_recurrent_scan(lambda a, b: b, x, ptr)
    assert masked_recurrent_scan(lambda a, b: b + a[:, :1], x, ptr, hidden_size=1).shape == (x.shape[0], 1)


@pytest.mark.parametrize("strategy", RECURRENT_STRATEGIES)
def test_empty_inputs(strategy):
    gru = MaskedGRU(3, 4, strategy=strategy).to(DT)
    out, hn = gru(torch.zeros(0, 3, dtype=DT), ptr_of([0, 0]), torch.ones(2, 4, dtype=DT), return_state=True)
    assert out.shape == (0, 4) and torch.equal(hn, torch.ones(2, 4, dtype=DT))
    out = gru(torch.zeros(0, 3, dtype=DT), torch.zeros(1, dtype=torch.long))  # no sequences at all
    assert out.shape == (0, 4)
    lstm = MaskedLSTM(3, 4, strategy=strategy).to(DT)
    assert lstm(torch.zeros(0, 3, dtype=DT), ptr_of([0])).shape == (0, 4)
    att = MaskedTemporalAttention(4, 2).to(DT)
    assert att(torch.zeros(0, 4, dtype=DT), ptr_of([0, 0])).shape == (0, 4)


def test_initial_state_errors():
    gru = MaskedGRU(3, 4)
    x = torch.randn(5, 3)
    ptr = ptr_of([2, 3])
    with pytest.raises(SignalValidationError, match=r"h0.*shape \[3, 4\].*expected \[2, 4\]"):
        gru(x, ptr, torch.zeros(3, 4))
    with pytest.raises(SignalValidationError, match="dtype"):
        gru(x, ptr, torch.zeros(2, 4, dtype=DT))
    with pytest.raises(SignalValidationError, match="meta"):
        gru(x, ptr, torch.zeros(2, 4, device="meta"))
    with pytest.raises(SignalValidationError, match="c0"):
        MaskedLSTM(3, 4)(x, ptr, (torch.zeros(2, 4), torch.zeros(2, 5)))
    with pytest.raises(SignalValidationError, match="pair"):
        MaskedLSTM(3, 4)(x, ptr, torch.zeros(2, 4))
    with pytest.raises(SignalValidationError, match="rows"):
        gru(torch.randn(4, 3), ptr)
    with pytest.raises(SignalValidationError, match="input_size"):
        gru(torch.randn(5, 2), ptr)
    with pytest.raises(SignalValidationError, match="strategy"):
        MaskedGRU(3, 4, strategy="nope")
    # torch.nn.GRU-style [1, S, H] is accepted
    assert gru(x, ptr, torch.zeros(1, 2, 4)).shape == (5, 4)


def test_supergraph_sequences():
    """End to end with the supergraph's temporal sequences of a signal whose vertex sets change."""
    from pyg_dynscale.data import DynamicGraphSignal

    torch.manual_seed(5)
    ids = [torch.tensor([0, 2, 3]), torch.tensor([1, 2]), torch.tensor([3, 0, 1, 2]), torch.tensor([2])]
    sig = DynamicGraphSignal([torch.zeros(2, 0, dtype=torch.long)] * 4, None, [torch.randn(len(i), 3) for i in ids],
                             node_ids=ids, num_vertices=4, dtype=DT)
    sg = sig.supergraph()
    gru = MaskedGRU(3, 2).to(DT)
    out = torch.empty(sig.num_vertex_time_nodes, 2, dtype=DT)
    out[sg.sequence_order] = gru(sig.x[sg.sequence_order], sg.sequence_ptr)
    ref = nn.GRU(3, 2, batch_first=True).to(DT)
    ref.load_state_dict(gru.state_dict())
    for v in range(4):
        gids = (sg.vertex == v).nonzero().flatten()  # time-major -> in time order
        torch.testing.assert_close(out[gids], ref(sig.x[gids].unsqueeze(0))[0][0], **TOL)


# -------------------------------------------------------------- attention
def per_sequence_attention(att: MaskedTemporalAttention, x, ptr, pos=None, causal=True):
    outs = []
    for s in range(ptr.numel() - 1):
        a, b = int(ptr[s]), int(ptr[s + 1])
        if a == b:
            continue
        p = torch.arange(b - a) if pos is None else pos[a:b]
        xs = (x[a:b] + att.position_embedding.weight[p]).unsqueeze(0)
        mask = torch.ones(b - a, b - a, dtype=torch.bool).triu(1) if causal else None
        outs.append(att.attn(xs, xs, xs, attn_mask=mask, need_weights=False)[0][0])
    return torch.cat(outs)


@pytest.mark.parametrize("strategy", ATTENTION_STRATEGIES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("case", ["mixed", "with_empty", "one_sequence", "all_length_one"])
def test_masked_attention_equals_per_sequence(strategy, causal, case):
    torch.manual_seed(6)
    lengths = LENGTH_CASES[case]
    ptr = ptr_of(lengths)
    D = 8
    att = MaskedTemporalAttention(D, 2, causal=causal, max_positions=16, strategy=strategy).to(DT)
    x = torch.randn(int(ptr[-1]), D, dtype=DT, requires_grad=True)
    out = att(x, ptr)
    expect = per_sequence_attention(att, x, ptr, causal=causal)
    torch.testing.assert_close(out, expect, **TOL)
    w = torch.randn_like(out)
    for a, b in zip(grads((out * w).sum(), [x, *att.parameters()]), grads((expect * w).sum(), [x, *att.parameters()])):
        if b is None:
            assert a is None or float(a.abs().max()) == 0.0
        else:
            torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("strategy", ATTENTION_STRATEGIES)
def test_attention_with_past_rows(strategy):
    """Past rows (e.g. from other ranks) act as earlier keys/values: the result
    equals attention over the whole sequences, restricted to the local rows."""
    torch.manual_seed(7)
    full_len = [5, 3, 1, 4, 2]
    past_len = [2, 0, 1, 3, 1]   # sequence 2 has no local rows at all
    loc_len = [f - p for f, p in zip(full_len, past_len)]
    D = 4
    att = MaskedTemporalAttention(D, 2, max_positions=8, strategy=strategy).to(DT)
    full_ptr = ptr_of(full_len)
    xf = torch.randn(int(full_ptr[-1]), D, dtype=DT, requires_grad=True)
    is_past = torch.cat([torch.arange(f) < p for f, p in zip(full_len, past_len)])
    expect = per_sequence_attention(att, xf, full_ptr)[~is_past]
    out = att(xf[~is_past], ptr_of(loc_len), past=(xf[is_past], ptr_of(past_len)))
    torch.testing.assert_close(out, expect, **TOL)
    w = torch.randn_like(out)
    torch.testing.assert_close(grads((out * w).sum(), [xf])[0], grads((expect * w).sum(), [xf])[0], **TOL)
    with pytest.raises(SignalValidationError, match="past_ptr"):
        att(xf[~is_past], ptr_of(loc_len), past=(xf[is_past], ptr_of(past_len[:-1])))


def test_attention_explicit_positions_and_errors():
    torch.manual_seed(8)
    ptr = ptr_of([3, 2])
    att = MaskedTemporalAttention(4, 1, max_positions=10).to(DT)
    x = torch.randn(5, 4, dtype=DT)
    pos = torch.tensor([0, 4, 7, 2, 9])  # e.g. snapshot indices
    torch.testing.assert_close(att(x, ptr, positions=pos), per_sequence_attention(att, x, ptr, pos=pos), **TOL)
    with pytest.raises(SignalValidationError, match="max_positions"):
        att(x, ptr, positions=torch.tensor([0, 1, 2, 3, 10]))
    with pytest.raises(SignalValidationError, match="max_positions"):
        MaskedTemporalAttention(4, 1, max_positions=2).to(DT)(x, ptr)
    no_pe = MaskedTemporalAttention(4, 1, position_embedding=False).to(DT)
    assert no_pe.position_embedding is None and no_pe(x, ptr).shape == (5, 4)


def test_benchmark_quick_runs():
    import subprocess
    import sys
    from pathlib import Path

    from tests.helpers.datasets import datasets_dir

    root = Path(__file__).resolve().parents[2]
    # --quick reads snap/CollegeMsg.txt: ../shared's, else its stand-in
    env = dict(os.environ, PYG_DYNSCALE_DATASETS=str(datasets_dir("snap/CollegeMsg.txt")))
    r = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_temporal_fusion.py"), "--quick"],
                       capture_output=True, text=True, timeout=120, cwd=root, env=env)
    assert r.returncode == 0, r.stderr
    assert "speedup vs padding" in r.stdout


@pytest.mark.parametrize("strategy", ["packed_rows", "packed_rows_autograd"])
def test_lstm_last_state_gradients_and_no_bias(strategy):
    """Gradients through (h_n, c_n) of the hand-written backward, and bias=False."""
    torch.manual_seed(9)
    lengths = [3, 1, 0, 4, 2]
    ptr = ptr_of(lengths)
    x = torch.randn(10, 2, dtype=DT, requires_grad=True)
    h0 = torch.randn(5, 3, dtype=DT, requires_grad=True)
    c0 = torch.randn(5, 3, dtype=DT, requires_grad=True)
    for bias in (True, False):
        lstm = MaskedLSTM(2, 3, bias=bias, strategy=strategy).to(DT)
        ref = MaskedLSTM(2, 3, bias=bias, strategy="padding").to(DT)
        ref.load_state_dict(lstm.state_dict())
        out, (hn, cn) = lstm(x, ptr, (h0, c0), return_state=True)
        # reference: per sequence with torch.nn.LSTM
        ref_out, ref_hn, ref_cn = [], [], []
        for s in range(5):
            a, b = int(ptr[s]), int(ptr[s + 1])
            if a == b:
                ref_hn.append(h0[s]); ref_cn.append(c0[s]); continue
            o, (rh, rc) = nn.LSTM.forward(ref, x[a:b].unsqueeze(0), (h0[s].view(1, 1, -1), c0[s].view(1, 1, -1)))
            ref_out.append(o[0]); ref_hn.append(rh[0, 0]); ref_cn.append(rc[0, 0])
        w1, w2, w3 = torch.randn_like(out), torch.randn_like(hn), torch.randn_like(cn)
        got = grads((out * w1).sum() + (hn * w2).sum() + (cn * w3).sum(), [x, h0, c0, *lstm.parameters()], retain=True)
        exp = grads((torch.cat(ref_out) * w1).sum() + (torch.stack(ref_hn) * w2).sum() + (torch.stack(ref_cn) * w3).sum(),
                    [x, h0, c0, *ref.parameters()], retain=True)
        for a, b in zip(got, exp):
            torch.testing.assert_close(a, b, **TOL)
        # only c_n used (h output gradient absent)
        g_c = grads((cn * w3).sum(), [x])[0]
        e_c = grads((torch.stack(ref_cn) * w3).sum(), [x])[0]
        torch.testing.assert_close(g_c, e_c, **TOL)


@pytest.mark.parametrize("strategy", RECURRENT_STRATEGIES)
def test_gru_no_bias(strategy):
    torch.manual_seed(10)
    ptr = ptr_of([2, 5, 1])
    gru = MaskedGRU(3, 2, bias=False, strategy=strategy).to(DT)
    ref = nn.GRU(3, 2, bias=False, batch_first=True).to(DT)
    ref.load_state_dict(gru.state_dict())
    x = torch.randn(8, 3, dtype=DT, requires_grad=True)
    h0 = torch.randn(3, 2, dtype=DT)
    out = gru(x, ptr, h0)
    expect = per_sequence_rnn(ref, x, ptr, h0)
    torch.testing.assert_close(out, expect, **TOL)
    w = torch.randn_like(out)
    for a, b in zip(grads((out * w).sum(), [x, *gru.parameters()]), grads((expect * w).sum(), [x, *ref.parameters()])):
        torch.testing.assert_close(a, b, **TOL)
