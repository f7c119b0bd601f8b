"""PyG's ``examples/tgn.py`` loop (pyg-team/pytorch_geometric @ 5c6461b), the
reference implementation for :class:`pyg_dynscale.ctdg.MemoryTrainer`.

Adapted only where the example touches the outside world: the data come in
memory instead of ``JODIEDataset``, the modules are passed in, the device is
the CPU, and ``test()`` scores with brute-force AP / AUC (below) because
scikit-learn is not installed here, averaged in float64 (the example's
``torch.tensor(aps).mean()`` is float32); the loop itself -- ``TemporalDataLoader``
batches and negatives, ``LastNeighborLoader``, ``TGNMemory.forward`` /
``update_state`` with its dict message store, the loss, ``float(loss)`` per
batch -- is the example's, line for line.
"""
import torch
from torch_geometric.loader import TemporalDataLoader
from torch_geometric.nn.models.tgn import LastNeighborLoader


def brute_force_ap(y_pred, y_true):
    """Mean over positives of the precision at the positive's score (ties: one threshold)."""
    s, y = y_pred.tolist(), y_true.tolist()
    pos = [i for i in range(len(s)) if y[i] > 0.5]
    total = 0.0
    for i in pos:
        above = [j for j in range(len(s)) if s[j] >= s[i]]
        total += sum(1 for j in above if y[j] > 0.5) / len(above)
    return total / len(pos)


def brute_force_auc(y_pred, y_true):
    """P(score of a positive > score of a negative), ties 1/2, over all pairs."""
    s, y = y_pred.tolist(), y_true.tolist()
    P = [s[i] for i in range(len(s)) if y[i] > 0.5]
    N = [s[i] for i in range(len(s)) if y[i] <= 0.5]
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in P for n in N) / (len(P) * len(N))


def batch_metrics(pos_out, neg_out, neg_scores=None):
    """``(ap, auc, reciprocal ranks)`` of one batch from its link predictor's outputs, as the example's
    ``test()`` scores them (AP / AUC of the sigmoid scores, by brute force above); ``neg_scores``
    (``[B * S]``, the MRR's ``S`` negatives of each positive, MemoryTrainer's MRR): each positive's
    ``1 / rank`` against them, ties counting 1/2 (``[]`` without them)."""
    y_pred = torch.cat([pos_out, neg_out], dim=0).sigmoid().cpu()
    y_true = torch.cat([torch.ones(pos_out.size(0)), torch.zeros(neg_out.size(0))], dim=0)
    ranks = []
    if neg_scores is not None:
        B = pos_out.size(0)
        S, scores = neg_scores.numel() // B, neg_scores.reshape(-1).tolist()
        for i in range(B):
            p = float(pos_out[i])
            others = scores[i * S:(i + 1) * S]
            rank = 1 + sum(1 for x in others if x > p) + 0.5 * sum(1 for x in others if x == p)
            ranks.append(1.0 / rank)
    return brute_force_ap(y_pred.view(-1), y_true), brute_force_auc(y_pred.view(-1), y_true), ranks


def split_metrics(outs, mrr_negatives=0):
    """``(ap, auc, mrr)`` of a split from its link predictor's outputs in the order the example's
    ``test()`` (and :class:`~pyg_dynscale.ctdg.MemoryTrainer`'s evaluation) makes them: per batch the
    positives, the negatives and, with ``mrr_negatives``, the MRR's pairs (``mrr``: ``None`` without).
    Metrics of *one* set of scores: AP, AUC and MRR are step functions of the scores (an ulp can make or
    break a tie), so two computations are compared by their scores and scored once."""
    step = 3 if mrr_negatives else 2
    aps, aucs, ranks = [], [], []
    for b in range(0, len(outs), step):
        ap, auc, rr = batch_metrics(outs[b], outs[b + 1], outs[b + 2] if mrr_negatives else None)
        aps.append(ap)
        aucs.append(auc)
        ranks.extend(rr)
    mean = lambda xs: float(torch.tensor(xs, dtype=torch.float64).mean())  # noqa: E731 -- as test() averages
    return mean(aps), mean(aucs), (sum(ranks) / len(ranks) if mrr_negatives else None)


class ExampleLoop:
    """The example's globals and its ``train()`` / ``test(loader)``."""

    def __init__(self, data, memory, gnn, link_pred, batch_size=200, num_neighbors=10, lr=0.0001):
        self.data = data
        self.train_data, self.val_data, self.test_data = data.train_val_test_split(val_ratio=0.15, test_ratio=0.15)
        self.train_loader = TemporalDataLoader(self.train_data, batch_size=batch_size, neg_sampling_ratio=1.0)
        self.val_loader = TemporalDataLoader(self.val_data, batch_size=batch_size, neg_sampling_ratio=1.0)
        self.test_loader = TemporalDataLoader(self.test_data, batch_size=batch_size, neg_sampling_ratio=1.0)
        self.neighbor_loader = LastNeighborLoader(data.num_nodes, size=num_neighbors)
        self.memory, self.gnn, self.link_pred = memory, gnn, link_pred
        self.optimizer = torch.optim.Adam(
            set(memory.parameters()) | set(gnn.parameters()) | set(link_pred.parameters()), lr=lr)
        self.criterion = torch.nn.BCEWithLogitsLoss()
        self.assoc = torch.empty(data.num_nodes, dtype=torch.long)
        self.batch_losses = []
        self.mrr_negatives = 0
        self.reciprocal_ranks = []

    def train(self):
        memory, gnn, link_pred, neighbor_loader = self.memory, self.gnn, self.link_pred, self.neighbor_loader
        data, assoc, optimizer, criterion = self.data, self.assoc, self.optimizer, self.criterion
        memory.train()
        gnn.train()
        link_pred.train()

        memory.reset_state()  # Start with a fresh memory.
        neighbor_loader.reset_state()  # Start with an empty graph.

        self.batch_losses = []
        total_loss = 0
        for batch in self.train_loader:
            optimizer.zero_grad()

            n_id, edge_index, e_id = neighbor_loader(batch.n_id)
            assoc[n_id] = torch.arange(n_id.size(0))

            # Get updated memory of all nodes involved in the computation.
            z, last_update = memory(n_id)
            z = gnn(z, last_update, edge_index, data.t[e_id], data.msg[e_id])
            pos_out = link_pred(z[assoc[batch.src]], z[assoc[batch.dst]])
            neg_out = link_pred(z[assoc[batch.src]], z[assoc[batch.neg_dst]])

            loss = criterion(pos_out, torch.ones_like(pos_out))
            loss += criterion(neg_out, torch.zeros_like(neg_out))

            # Update memory and neighbor loader with ground-truth state.
            memory.update_state(batch.src, batch.dst, batch.t, batch.msg)
            neighbor_loader.insert(batch.src, batch.dst)

            loss.backward()
            optimizer.step()
            memory.detach()
            self.batch_losses.append(float(loss))
            total_loss += float(loss) * batch.num_events

        return total_loss / self.train_data.num_events

    @torch.no_grad()
    def test(self, loader):
        memory, gnn, link_pred, neighbor_loader = self.memory, self.gnn, self.link_pred, self.neighbor_loader
        data, assoc = self.data, self.assoc
        memory.eval()
        gnn.eval()
        link_pred.eval()

        torch.manual_seed(12345)  # Ensure deterministic sampling across epochs.

        aps, aucs = [], []
        for batch in loader:
            n_id, edge_index, e_id = neighbor_loader(batch.n_id)
            assoc[n_id] = torch.arange(n_id.size(0))

            z, last_update = memory(n_id)
            z = gnn(z, last_update, edge_index, data.t[e_id], data.msg[e_id])
            pos_out = link_pred(z[assoc[batch.src]], z[assoc[batch.dst]])
            neg_out = link_pred(z[assoc[batch.src]], z[assoc[batch.neg_dst]])

            neg_scores = None
            if self.mrr_negatives:  # not in the example: MemoryTrainer's MRR, by brute force
                B, S = batch.num_events, min(self.mrr_negatives, batch.num_events)
                pairs = [(i, batch.neg_dst[(i + s) % B]) for i in range(B) for s in range(S)]
                zs = torch.stack([z[assoc[batch.src[i]]] for i, _ in pairs])
                zn = torch.stack([z[assoc[n]] for _, n in pairs])
                neg_scores = link_pred(zs, zn)
            ap, auc, ranks = batch_metrics(pos_out, neg_out, neg_scores)
            aps.append(ap)
            aucs.append(auc)
            self.reciprocal_ranks.extend(ranks)

            memory.update_state(batch.src, batch.dst, batch.t, batch.msg)
            neighbor_loader.insert(batch.src, batch.dst)
        return float(torch.tensor(aps, dtype=torch.float64).mean()), float(torch.tensor(aucs, dtype=torch.float64).mean())


# ---- the example's module definitions and construction, verbatim (sizes as arguments)
from torch.nn import Linear  # noqa: E402
from torch_geometric.nn import TGNMemory, TransformerConv  # noqa: E402
from torch_geometric.nn.models.tgn import IdentityMessage, LastAggregator  # noqa: E402


class GraphAttentionEmbedding(torch.nn.Module):
    def __init__(self, in_channels, out_channels, msg_dim, time_enc):
        super().__init__()
        self.time_enc = time_enc
        edge_dim = msg_dim + time_enc.out_channels
        self.conv = TransformerConv(in_channels, out_channels // 2, heads=2,
                                    dropout=0.1, edge_dim=edge_dim)

    def forward(self, x, last_update, edge_index, t, msg):
        rel_t = last_update[edge_index[0]] - t
        rel_t_enc = self.time_enc(rel_t.to(x.dtype))
        edge_attr = torch.cat([rel_t_enc, msg], dim=-1)
        return self.conv(x, edge_index, edge_attr)


class LinkPredictor(torch.nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.lin_src = Linear(in_channels, in_channels)
        self.lin_dst = Linear(in_channels, in_channels)
        self.lin_final = Linear(in_channels, 1)

    def forward(self, z_src, z_dst):
        h = self.lin_src(z_src) + self.lin_dst(z_dst)
        h = h.relu()
        return self.lin_final(h)


def build_example_modules(data, memory_dim, time_dim, embedding_dim):
    memory = TGNMemory(
        data.num_nodes,
        data.msg.size(-1),
        memory_dim,
        time_dim,
        message_module=IdentityMessage(data.msg.size(-1), memory_dim, time_dim),
        aggregator_module=LastAggregator(),
    )
    gnn = GraphAttentionEmbedding(
        in_channels=memory_dim,
        out_channels=embedding_dim,
        msg_dim=data.msg.size(-1),
        time_enc=memory.time_enc,
    )
    link_pred = LinkPredictor(in_channels=embedding_dim)
    return memory, gnn, link_pred
