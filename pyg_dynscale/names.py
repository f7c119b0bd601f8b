"""The names the command line offers as choices, defined without torch.

``pyg-dynscale --help`` and every subcommand's argument parser read these
tuples; the modules that act on them (:mod:`pyg_dynscale.nn.zoo`,
:mod:`pyg_dynscale.partition.pattern`, :mod:`pyg_dynscale.partition.partition`,
:mod:`pyg_dynscale.commands.user_model`) re-export them from here. Kept in a
module that imports nothing, so that building the parser does not import torch
or torch_geometric (seconds), and a missing file is reported before they load.
"""
from __future__ import annotations

#: models built from PyGT classes that run on the black-box path
BLACK_BOX_MODELS = ("gconvgru", "gclstm", "dcrnn")
#: the models :func:`~pyg_dynscale.nn.zoo.build_model` builds
MODEL_NAMES = ("tgcn", "tgcn-deep", "dysat", "mpnnlstm", "mpnnlstm-dgc", "tmgcn") + BLACK_BOX_MODELS
#: models gradient checkpointing over windows of snapshots runs (DySAT's attention reads every earlier
#: appearance, TM-GCN's M-transform the earlier ones in its band; the MPNN-LSTMs' BatchNorm statistics
#: would be updated twice by the recomputation)
RECOMPUTABLE_MODELS = ("tgcn", "tgcn-deep") + BLACK_BOX_MODELS
#: what a model predicts: node regression or next-snapshot links
TARGETS = ("node", "link")
#: the dependency-pattern presets :meth:`~pyg_dynscale.partition.DependencyPattern.preset` knows
PATTERN_MODELS = ("tgcn", "mpnnlstm", "mpnnlstmpygt", "dysat", "gconvgru", "tmgcn")
#: the scheme names :func:`~pyg_dynscale.partition.partition` accepts (``"auto"``: the lowest predicted epoch
#: among the others, :mod:`~pyg_dynscale.partition.schemes.auto`)
SCHEMES = ("auto", "pss", "pts", "pss-ts", "pgc")
#: Constructor parameters filled with the data's node features when ``--model-args`` does not give them.
INPUT_SIZE_KEYWORDS = ("in_channels", "node_features", "num_node_features", "num_features", "in_features",
                       "input_dim", "in_dim", "input_size", "feature_dim")
