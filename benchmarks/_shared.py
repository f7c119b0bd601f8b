"""Where the benchmarks find the project's shared real data.

``$PYG_DYNSCALE_DATASETS`` if set, else ``../shared/datasets`` next to the
checkout (the layout of the team's machines and CI).
"""
from __future__ import annotations

import os
from pathlib import Path

DATASETS = Path(
    os.environ.get("PYG_DYNSCALE_DATASETS", Path(__file__).resolve().parents[2] / "shared" / "datasets")
)

#: The model forms DGC evaluates (§7.1), which the partitioning benchmarks use
#: by default: T-GCN with ``gcn_layers=2`` ("three 2-layer GCNs"), DySAT with
#: ``num_blocks=2``, MPNN-LSTM as the ``"mpnnlstm"`` preset (DGC's form
#: already). PyGT's one-layer T-GCN and a one-block DySAT exchange only raw
#: input features spatially; the distributed runtime loads those once before
#: training, so their spatial edges cost nothing per epoch (weight 0) and a
#: partitioner comparison on them says nothing about spatial cuts.
DGC_FORMS = {"tgcn": {"gcn_layers": 2}, "dysat": {"num_blocks": 2}, "mpnnlstm": {}}


def dgc_pattern(model: str, in_channels: int, hidden: int, **kwargs):
    """``DependencyPattern.preset(model, in_channels, hidden)`` in DGC's model
    form (:data:`DGC_FORMS`; other presets unchanged). ``kwargs`` override."""
    from pyg_dynscale.partition import DependencyPattern

    key = str(model).lower().replace("-", "").replace("_", "")
    return DependencyPattern.preset(model, in_channels, hidden, **{**DGC_FORMS.get(key, {}), **kwargs})
