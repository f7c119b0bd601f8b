r"""Hand-written forward/backward (BPTT) of the masked GRU/LSTM scan.

Autograd records ~10 small ops per time step and replays ~25 backward nodes;
with few thousand rows per step that per-op overhead dominates on CPU. Here the
forward runs without autograd into preallocated time-major buffers, and the
backward walks the steps in reverse computing only the state gradient per step;
the hidden-weight gradient is one matmul over all steps at the end
(:math:`\partial W_{hh} = \sum_t \delta_t^\top h_{t-1} = \Delta^\top H`).
The math is exactly the GRU/LSTM of :class:`torch.nn.GRU` / :class:`torch.nn.LSTM`;
the tests compare gradients with autograd in float64.

Layout: everything is in the time-major order of
:class:`~pyg_dynscale.nn.packing.SequencePacking` (step ``t`` holds rows
``0 .. active[t]-1``, which are the first rows of step ``t-1``).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .packing import SequencePacking


def _steps(packing: SequencePacking) -> list[tuple[int, int, int, int]]:
    """``(t, active rows, lo, hi)`` of every non-empty time step, in time order
    (step ``t`` is rows ``lo:hi`` of the time-major buffers; ``active`` never
    grows with ``t``, so the steps end at the first empty one)."""
    active, steps = packing.active_list, packing.step_list
    out = []
    for t in range(packing.row_len):
        if active[t] == 0:
            break
        out.append((t, active[t], steps[t], steps[t + 1]))
    return out


def _initial(state_prev: Optional[Tensor], h0: Tensor, a: int, rows: Tensor, seqs: Tensor, t: int) -> Tensor:
    """State entering step ``t``: the first ``a`` rows of the previous state, with
    rows that start a sequence replaced by its initial state (DGC Eq. 4-5)."""
    if t == 0:
        return h0.index_select(0, seqs)
    h = state_prev[:a]
    if rows.numel():
        h = h.clone()
        h[rows] = h0.index_select(0, seqs)
    return h


class FusedGRUScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gi: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Optional[Tensor], packing: SequencePacking, resets):
        M, H = gi.shape[0], h0.shape[1]
        h_in = gi.new_empty(M, H)
        out = gi.new_empty(M, H)
        rz = gi.new_empty(M, 2 * H)
        n_all = gi.new_empty(M, H)
        ghn_all = gi.new_empty(M, H)
        w_t = w_hh.t()
        prev = None
        for t, a, lo, hi in _steps(packing):
            rows, seqs = resets[t]
            h = _initial(prev, h0, a, rows, seqs, t)
            h_in[lo:hi] = h
            gh = torch.mm(h, w_t) if b_hh is None else torch.addmm(b_hh, h, w_t)
            g = gi[lo:hi]
            s = torch.sigmoid_(g[:, : 2 * H] + gh[:, : 2 * H])
            rz[lo:hi] = s
            r, z = s[:, :H], s[:, H:]
            ghn = gh[:, 2 * H:]
            ghn_all[lo:hi] = ghn
            n = torch.tanh_(torch.addcmul(g[:, 2 * H:], r, ghn))
            n_all[lo:hi] = n
            hn = torch.addcmul(n, z, h - n)
            out[lo:hi] = hn
            prev = hn
        ctx.save_for_backward(h_in, rz, n_all, ghn_all, w_hh)
        ctx.packing, ctx.resets, ctx.has_bias = packing, resets, b_hh is not None
        ctx.S = h0.shape[0]
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout: Tensor):
        h_in, rz, n_all, ghn_all, w_hh = ctx.saved_tensors
        packing, resets = ctx.packing, ctx.resets
        M, H = h_in.shape
        dgi = dout.new_empty(M, 3 * H)
        dgh = dout.new_empty(M, 3 * H)
        dh0 = dout.new_zeros(ctx.S, H)
        carry: Optional[Tensor] = None
        for t, a, lo, hi in reversed(_steps(packing)):
            dh = dout[lo:hi]
            if carry is not None:
                dh = dh.clone()
                dh[: carry.shape[0]] += carry
            r, z = rz[lo:hi, :H], rz[lo:hi, H:]
            n, ghn, h = n_all[lo:hi], ghn_all[lo:hi], h_in[lo:hi]
            # h' = n + z * (h - n)
            dn = dh * (1 - z)
            dz = dh * (h - n)
            dn_pre = dn * (1 - n * n)
            dr = dn_pre * ghn
            gi_t = dgi[lo:hi]
            gi_t[:, :H] = dr * r * (1 - r)
            gi_t[:, H:2 * H] = dz * z * (1 - z)
            gi_t[:, 2 * H:] = dn_pre
            gh_t = dgh[lo:hi]
            gh_t[:, : 2 * H] = gi_t[:, : 2 * H]
            gh_t[:, 2 * H:] = dn_pre * r
            dh_in = torch.addmm(dh * z, gh_t, w_hh)
            rows, seqs = resets[t]
            if rows.numel():
                dh0.index_add_(0, seqs, dh_in[rows])
                dh_in[rows] = 0
            carry = dh_in
        dw = torch.mm(dgh.t(), h_in)
        db = dgh.sum(0) if ctx.has_bias else None
        return dgi, dh0, dw, db, None, None


class FusedLSTMScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gi: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor, b_hh: Optional[Tensor], packing: SequencePacking, resets):
        ctx.set_materialize_grads(False)
        M, H = gi.shape[0], h0.shape[1]
        h_in = gi.new_empty(M, H)
        c_in = gi.new_empty(M, H)
        gates = gi.new_empty(M, 4 * H)  # sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)
        tc_all = gi.new_empty(M, H)
        out_h = gi.new_empty(M, H)
        out_c = gi.new_empty(M, H)
        w_t = w_hh.t()
        hp = cp = None
        for t, a, lo, hi in _steps(packing):
            rows, seqs = resets[t]
            h = _initial(hp, h0, a, rows, seqs, t)
            c = _initial(cp, c0, a, rows, seqs, t)
            h_in[lo:hi] = h
            c_in[lo:hi] = c
            g = gi[lo:hi] + (torch.mm(h, w_t) if b_hh is None else torch.addmm(b_hh, h, w_t))
            gs = gates[lo:hi]
            torch.sigmoid(g, out=gs)
            gs[:, 2 * H:3 * H] = torch.tanh(g[:, 2 * H:3 * H])
            i, f, gg, o = gs[:, :H], gs[:, H:2 * H], gs[:, 2 * H:3 * H], gs[:, 3 * H:]
            cn = torch.addcmul(f * c, i, gg)
            tc = torch.tanh(cn)
            tc_all[lo:hi] = tc
            hn = o * tc
            out_h[lo:hi] = hn
            out_c[lo:hi] = cn
            hp, cp = hn, cn
        ctx.save_for_backward(h_in, c_in, gates, tc_all, w_hh)
        ctx.packing, ctx.resets, ctx.has_bias = packing, resets, b_hh is not None
        ctx.S = h0.shape[0]
        return out_h, out_c

    @staticmethod
    @once_differentiable
    def backward(ctx, dout_h: Tensor, dout_c: Optional[Tensor]):
        h_in, c_in, gates, tc_all, w_hh = ctx.saved_tensors
        packing, resets = ctx.packing, ctx.resets
        M, H = h_in.shape
        if dout_h is None:
            dout_h = h_in.new_zeros(M, H)
        dG = h_in.new_empty(M, 4 * H)
        dh0 = h_in.new_zeros(ctx.S, H)
        dc0 = h_in.new_zeros(ctx.S, H)
        carry_h: Optional[Tensor] = None
        carry_c: Optional[Tensor] = None
        for t, a, lo, hi in reversed(_steps(packing)):
            dh = dout_h[lo:hi]
            dc = dout_c[lo:hi].clone() if dout_c is not None else None
            if carry_h is not None:
                k = carry_h.shape[0]
                dh = dh.clone()
                dh[:k] += carry_h
                if dc is None:
                    dc = h_in.new_zeros(hi - lo, H)
                dc[:k] += carry_c
            gs = gates[lo:hi]
            i, f, gg, o = gs[:, :H], gs[:, H:2 * H], gs[:, 2 * H:3 * H], gs[:, 3 * H:]
            tc, c = tc_all[lo:hi], c_in[lo:hi]
            dct = torch.addcmul(dc, dh * o, 1 - tc * tc) if dc is not None else dh * o * (1 - tc * tc)
            d = dG[lo:hi]
            d[:, :H] = dct * gg * i * (1 - i)
            d[:, H:2 * H] = dct * c * f * (1 - f)
            d[:, 2 * H:3 * H] = dct * i * (1 - gg * gg)
            d[:, 3 * H:] = dh * tc * o * (1 - o)
            dh_in = torch.mm(d, w_hh)
            dc_in = dct * f
            rows, seqs = resets[t]
            if rows.numel():
                dh0.index_add_(0, seqs, dh_in[rows])
                dc0.index_add_(0, seqs, dc_in[rows])
                dh_in[rows] = 0
                dc_in[rows] = 0
            carry_h, carry_c = dh_in, dc_in
        dw = torch.mm(dG.t(), h_in)
        db = dG.sum(0) if ctx.has_bias else None
        return dG, dh0, dc0, dw, db, None, None



def _tanh_(x: Tensor) -> Tensor:
    r"""In-place :math:`\tanh x = 2\sigma(2x) - 1` (exact identity; a few ulps
    from ``torch.tanh``, which is ~5x slower than ``sigmoid`` on some CPU builds)."""
    return x.mul_(2).sigmoid_().mul_(2).sub_(1)


class FusedTGCNScan(torch.autograd.Function):
    r"""The T-GCN recurrence over the packed time-major layout, with the input
    projection inside the scan and a hand-written BPTT (same scheme as
    :class:`FusedGRUScan`).

    Per step, with :math:`u = x W_{in}^\top + b_{in}` (or :math:`u = x` when
    ``w_in`` is ``None``), :math:`u = [u_z \| u_r \| u_h]`:

    .. math::
        [Z \| R] = \sigma(u_{zr} + H W_{zr}^\top), \quad
        \tilde H = \tanh(u_h + (H \odot R) W_h^\top), \quad
        H' = \tilde H + Z \odot (H - \tilde H).

    Backward per step (:math:`\delta` = gradient of :math:`H'`):
    :math:`\delta_h = \delta (1-Z)(1-\tilde H^2)`, :math:`\delta_{HR} = \delta_h W_h`,
    :math:`\delta_z = \delta (H-\tilde H) Z(1-Z)`, :math:`\delta_r = \delta_{HR} H R(1-R)`,
    :math:`\partial H = \delta Z + \delta_{HR} R + [\delta_z\|\delta_r] W_{zr}`.
    Weight gradients are accumulated per step while the step's rows are in
    cache, and the input projection runs per step too, so no ``[M, 3H]``
    projection or gradient is ever materialized (on CPU, fresh large buffers
    cost more in page faults than the arithmetic).

    Args (forward): ``x [M, D]`` time-major, ``w_in [3H, D]`` / ``b_in [3H]``
    or ``None``, ``h0 [S, H]``, ``w_zr [2H, H]``, ``w_h [H, H]``, the packing
    and its reset schedule. Returns ``[M, H]`` (time-major).
    """

    @staticmethod
    def forward(ctx, x: Tensor, w_in: Optional[Tensor], b_in: Optional[Tensor], h0: Tensor, w_zr: Tensor,
                w_h: Tensor, packing: SequencePacking, resets):
        M, H = x.shape[0], h0.shape[1]
        gates = x.new_empty(M, 3 * H)  # u, then [Z | R | H~] in place
        out = x.new_empty(M, H)
        w_zr_t, w_h_t = w_zr.t(), w_h.t()
        w_in_t = w_in.t() if w_in is not None else None
        prev: Optional[Tensor] = None
        for t, a, lo, hi in _steps(packing):
            h = _initial(prev, h0, a, *resets[t], t)
            g = gates[lo:hi]
            if w_in_t is None:
                g.copy_(x[lo:hi])
            elif b_in is None:
                torch.mm(x[lo:hi], w_in_t, out=g)
            else:
                torch.addmm(b_in, x[lo:hi], w_in_t, out=g)
            s = g[:, : 2 * H]
            s.addmm_(h, w_zr_t).sigmoid_()
            ht = g[:, 2 * H:]
            _tanh_(ht.addmm_(h * s[:, H:], w_h_t))
            hn = out[lo:hi]
            torch.addcmul(ht, s[:, :H], h - ht, out=hn)
            prev = hn
        ctx.save_for_backward(x, w_in, h0, w_zr, w_h, gates, out)
        ctx.packing, ctx.resets, ctx.has_b = packing, resets, b_in is not None
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout: Tensor):
        x, w_in, h0, w_zr, w_h, gates, out = ctx.saved_tensors
        packing, resets = ctx.packing, ctx.resets
        steps = packing.step_list
        M, H = out.shape
        need_x = ctx.needs_input_grad[0]
        proj = w_in is not None
        dx = dout.new_empty(x.shape) if need_x else None
        dw_in = dout.new_zeros(w_in.shape) if proj else None
        db_in = dout.new_zeros(3 * H) if proj and ctx.has_b else None
        dh0 = dout.new_zeros(h0.shape)
        dw_zr = dout.new_zeros(w_zr.shape)
        dw_h = dout.new_zeros(w_h.shape)
        carry: Optional[Tensor] = None
        for t, a, lo, hi in reversed(_steps(packing)):
            rows, seqs = resets[t]
            # the state that entered step t (previous step's output, resets replaced)
            h = _initial(out[steps[t - 1]:steps[t]] if t > 0 else None, h0, a, rows, seqs, t)
            dh = dout[lo:hi]
            if carry is not None:
                k = carry.shape[0]
                if k == a:
                    dh = dh + carry
                else:
                    dh = dh.clone()
                    dh[:k] += carry
            g = gates[lo:hi]
            z, r, ht = g[:, :H], g[:, H:2 * H], g[:, 2 * H:]
            d = dx[lo:hi] if (need_x and not proj) else dout.new_empty(a, 3 * H)
            dph = d[:, 2 * H:]
            torch.mul(dh, 1 - z, out=dph)
            dph.mul_(1 - ht * ht)
            dhr = torch.mm(dph, w_h)
            dpz = d[:, :H]
            torch.mul(dh, h - ht, out=dpz)
            dpz.mul_(z * (1 - z))
            dpr = d[:, H:2 * H]
            torch.mul(dhr, h, out=dpr)
            dpr.mul_(r * (1 - r))
            dzr = d[:, : 2 * H]
            dw_zr.addmm_(dzr.t(), h)
            dw_h.addmm_(dph.t(), h * r)
            if proj:
                xt = x[lo:hi]
                dw_in.addmm_(d.t(), xt)
                if db_in is not None:
                    db_in += d.sum(0)
                if need_x:
                    torch.mm(d, w_in, out=dx[lo:hi])
            dh_in = torch.addcmul(dh * z, dhr, r)
            dh_in.addmm_(dzr, w_zr)
            if rows.numel():
                dh0.index_add_(0, seqs, dh_in[rows])
                dh_in[rows] = 0
            carry = dh_in
        return dx, dw_in, db_in, dh0, dw_zr, dw_h, None, None
