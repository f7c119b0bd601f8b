r"""Dataset loaders: PyGT's JSON datasets, temporal edge lists, and the
embedded England COVID dataset. None of them downloads anything.

.. code-block:: python

    from pyg_dynscale.data.loaders import load, load_edge_list, load_england_covid, load_pygt_json

    signal = load_england_covid()                             # offline, = PyGT's loader
    signal = load_pygt_json("chickenpox.json", feature_lags=4)  # any PyGT JSON file
    signal = load_edge_list("sx-mathoverflow.txt.gz", window="7d", target="link")
    signal = load("CollegeMsg.txt", window="1d")              # format detected
"""
from ._common import DatasetFormatError, DatasetNotFoundError
from .auto import detect_format, load
from .edgelist import load_edge_list, parse_window
from .embedded import embedded_england_covid_path, load_england_covid
from .pygt_json import CANONICAL_FILES, DATASET_OPTIONS, DATASETS, detect_dataset, load_pygt_json

__all__ = [
    "CANONICAL_FILES",
    "DATASETS",
    "DATASET_OPTIONS",
    "DatasetFormatError",
    "DatasetNotFoundError",
    "detect_dataset",
    "detect_format",
    "embedded_england_covid_path",
    "load",
    "load_edge_list",
    "load_england_covid",
    "load_pygt_json",
    "parse_window",
]
