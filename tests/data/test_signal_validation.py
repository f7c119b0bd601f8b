"""The bad-input catalog: every inconsistency fails at construction with a typed
error that names the field (and says how to fix it)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pyg_dynscale import DynamicGraphSignal, SignalValidationError

EI = [np.array([[0, 1], [1, 2]]), np.array([[0], [2]])]
X = [np.ones((3, 2)), np.ones((3, 2))]
Y = [np.zeros(3), np.zeros(3)]
W = [np.ones(2), np.ones(1)]


def build(**over):
    args = dict(edge_indices=EI, edge_weights=W, features=X, targets=Y)
    extra = {k: over.pop(k) for k in list(over) if k not in args}
    args.update(over)
    return DynamicGraphSignal(args["edge_indices"], args["edge_weights"], args["features"], args["targets"], **extra)


CASES = [
    # (id, kwargs, field named in the error, words in the message)
    ("zero_snapshots", dict(edge_indices=[], edge_weights=[], features=[], targets=[]), "edge_indices", "zero snapshots"),
    ("snapshot_count_mismatch_features", dict(features=X + [np.ones((3, 2))]), "features", "disagree on the number of snapshots"),
    ("snapshot_count_mismatch_targets", dict(targets=Y[:1]), "targets", "disagree"),
    ("snapshot_count_mismatch_weights", dict(edge_weights=W[:1]), "edge_weights", "disagree"),
    ("edge_index_float", dict(edge_indices=[e.astype(float) for e in EI]), "edge_indices[0]", "integer"),
    ("edge_index_wrong_shape", dict(edge_indices=[np.array([[0, 1, 2]]), EI[1]]), "edge_indices[0]", "shape [2, num_edges]"),
    ("edge_index_transposed", dict(edge_indices=[np.array([[0, 1], [1, 2], [2, 0]]), EI[1]], edge_weights=None), "edge_indices[0]", "transpose"),
    ("edge_index_3d", dict(edge_indices=[np.zeros((2, 1, 1), dtype=np.int64), EI[1]]), "edge_indices[0]", "shape"),
    ("edge_index_negative", dict(edge_indices=[np.array([[0, -1], [1, 2]]), EI[1]]), "edge_indices[0]", "negative"),
    ("edge_index_out_of_range", dict(edge_indices=[EI[0], np.array([[0], [3]])]), "edge_indices[1]", "only 3 vertices"),
    ("edge_weight_length", dict(edge_weights=[np.ones(3), np.ones(1)]), "edge_weights[0]", "3 rows"),
    ("edge_weight_2d", dict(edge_weights=[np.ones((2, 2)), np.ones(1)]), "edge_weights[0]", "1-D"),
    ("edge_weight_nan", dict(edge_weights=[np.array([1.0, np.nan]), np.ones(1)]), "edge_weights", "NaN"),
    ("feature_rows_mismatch", dict(features=[np.ones((3, 2)), np.ones((4, 2))]), "targets[1]", "has 3 rows but snapshot 1 has 4 vertices"),
    ("feature_columns_change", dict(features=[np.ones((3, 2)), np.ones((3, 5))]), "features[1]", "trailing shape"),
    ("target_rows_mismatch", dict(targets=[np.zeros(3), np.zeros(2)]), "targets[1]", "2 rows"),
    ("features_nan", dict(features=[np.ones((3, 2)), np.array([[1.0, np.nan]] * 3)]), "features", "NaN"),
    ("features_inf", dict(features=[np.full((3, 2), np.inf), np.ones((3, 2))]), "features", "snapshot 0"),
    ("features_string_dtype", dict(features=[np.array([["a", "b"]] * 3), np.ones((3, 2))]), "features[0]", "not numeric"),
    ("features_complex", dict(features=[np.ones((3, 2), dtype=complex), np.ones((3, 2))]), "features", "complex"),
    ("features_object", dict(features=[np.array([[1, None]] * 3, dtype=object), np.ones((3, 2))]), "features[0]", "not numeric"),
    ("features_partially_none", dict(features=[np.ones((3, 2)), None]), "features[1]", "None"),
    ("edge_indices_none_snapshot", dict(edge_indices=[EI[0], None]), "edge_indices[1]", "None"),
    ("duplicate_vertex_ids", dict(node_ids=[np.array([0, 1, 1]), np.array([0, 1, 2])]), "node_ids[0]", "more than once"),
    ("node_ids_float", dict(node_ids=[np.array([0.0, 1.0, 2.0]), np.array([0, 1, 2])]), "node_ids[0]", "integer"),
    ("node_ids_negative", dict(node_ids=[np.array([0, -4, 2]), np.array([0, 1, 2])]), "node_ids[0]", "negative"),
    ("node_ids_vs_features", dict(node_ids=[np.array([0, 1]), np.array([0, 1, 2])]), "features[0]", "3 rows"),
    ("num_vertices_too_small", dict(node_ids=[np.array([0, 1, 7]), np.array([0, 1, 2])], num_vertices=5), "num_vertices", "vertex id 7"),
    ("reserved_extra_name", dict(edge_attr=[np.ones(2), np.ones(1)]), "edge_attr", "reserved"),
    ("unknown_level", dict(field_levels={"x": "vertex"}), "field_levels['x']", "one of"),
    ("graph_level_shape_changes", dict(field_levels={"y": "graph"}, targets=[np.zeros(2), np.zeros(3)]), "targets[1]", "same shape"),
    ("extra_index_out_of_range", dict(edge_label_index=[np.array([[0], [5]]), np.array([[0], [1]])]), "edge_label_index[0]", "outside"),
]


@pytest.mark.parametrize("case_id,kwargs,field,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_rejected_with_field_and_fix(case_id, kwargs, field, words):
    with pytest.raises(SignalValidationError) as info:
        build(**kwargs)
    err = info.value
    assert err.field == field, str(err)
    assert words in str(err), str(err)
    assert f"'{field}'" in str(err)
    assert err.fix, "every error says how to fix it"


def test_catalog_is_large_enough():
    assert len(CASES) >= 15


def test_nonfinite_allowed_when_asked():
    s = build(features=[np.full((3, 2), np.nan), np.ones((3, 2))], allow_nonfinite=True)
    assert torch.isnan(s[0].x).all()


def test_errors_are_value_errors():
    # callers that catch ValueError keep working
    with pytest.raises(ValueError):
        build(targets=Y[:1])


def test_from_tensors_validates_too():
    with pytest.raises(SignalValidationError, match="edge_ptr"):
        DynamicGraphSignal.from_tensors(node_ptr=torch.tensor([0, 2]), edge_index=torch.tensor([[0], [1]]),
                                        edge_ptr=torch.tensor([0, 2]))
    with pytest.raises(SignalValidationError, match="only 2 vertices"):
        DynamicGraphSignal.from_tensors(node_ptr=torch.tensor([0, 2]), edge_index=torch.tensor([[0], [2]]),
                                        edge_ptr=torch.tensor([0, 1]))
    with pytest.raises(SignalValidationError, match="more than once"):
        DynamicGraphSignal.from_tensors(node_ptr=torch.tensor([0, 2]), edge_index=torch.zeros(2, 0, dtype=torch.long),
                                        edge_ptr=torch.tensor([0, 0]), node_id=torch.tensor([3, 3]))
    with pytest.raises(SignalValidationError, match="non-decreasing"):
        DynamicGraphSignal.from_tensors(node_ptr=torch.tensor([0, 2, 1]), edge_index=torch.zeros(2, 0, dtype=torch.long),
                                        edge_ptr=torch.tensor([0, 0, 0]))
