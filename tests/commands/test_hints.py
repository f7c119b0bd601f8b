"""pyg_dynscale.commands.hints: an error line in the words of the command line (the catalogue of bad input,
tests/commands/test_bad_input_catalogue.py, checks it on real invocations)."""
from __future__ import annotations

import pytest

from pyg_dynscale.commands.hints import FIELD_OPTIONS, for_cli, option_for


def test_hints_name_options_not_api_keywords() -> None:
    """The rewriting itself: fields, ``name=value``, bare identifiers and option-less fixes; quoted text kept."""
    assert for_cli("field 'val': has no events. Fix: use a larger val_ratio / test_ratio.", "train-events") == \
        "--val-ratio: has no events. Fix: use a larger --val-ratio / --test-ratio."
    assert for_cli("field 'batch_size': is 3, not a multiple of blocks=8. Fix: use batch_size=8.", "train") == \
        "--batch-size: is 3, not a multiple of --blocks 8. Fix: use --batch-size 8."
    assert for_cli("--lags: field 'lags': too long.", "train") == "--lags: too long."
    assert for_cli("PATH 'my_val_ratio.csv': x.", "train-events") == "PATH 'my_val_ratio.csv': x."
    assert for_cli("f.csv: line 2: bad. Fix: sort the file by time, or pass sort=True (stable: ties keep file "
                   "order).", "partition-events") == \
        "f.csv: line 2: bad. Fix: sort the file by time, keeping the order of lines with equal times."
    # a line that names the option already keeps the record's field names (a resume's list of fields)
    line = "train_ratio: checkpoint 0.8, this run 0.7 (--train-ratio)"
    assert for_cli(line, "train") == line


def test_option_for_is_the_one_table_of_each_subcommand():
    from pyg_dynscale.commands import train_events

    assert train_events.FIELD_OPTIONS is FIELD_OPTIONS["train-events"]  # not a copy: one place
    assert option_for("train", "batch_size") == "--batch-size"
    assert option_for("train", "no_such_field", "--lags") == "--lags"


@pytest.mark.parametrize("command", sorted(FIELD_OPTIONS))
def test_every_option_named_exists_in_its_subcommand(command):
    """The tables name options the subcommand's parser has (a renamed option cannot leave a stale hint)."""
    from pyg_dynscale.cli import build_parser

    parser = build_parser().subcommands[command]
    known = {s for a in parser._actions for s in a.option_strings}
    assert set(FIELD_OPTIONS[command].values()) <= known, set(FIELD_OPTIONS[command].values()) - known
