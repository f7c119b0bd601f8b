r"""Error lines in the words of the command line: the library's errors name API
arguments (``field 'val_ratio'``, ``pass sort=True``, ``lower skip_rows``);
a ``pyg-dynscale`` user typed options, so every error line is rewritten here
(:func:`for_cli`, called once for every subcommand by :func:`pyg_dynscale.cli.main`)
into the options of the subcommand that ran:

* ``field 'NAME': ...`` becomes ``--option: ...`` (and ``option 'NAME' is``
  ``--option is``) where ``NAME`` is an API field that an option sets
  (:data:`FIELD_OPTIONS`, per subcommand);
* ``NAME=VALUE`` becomes ``--option VALUE`` (``--flag`` for ``True``), and a
  bare ``NAME`` with an underscore (an identifier, never prose) ``--option``,
  unless the line names that option already (a resume's list of fields);
* the fixes that have no option (``skip_rows``, ``allow_nonfinite``, ``sort``)
  are phrased as what to change in the file (:data:`CLI_PHRASES`).

Quoted text (paths, values in ``'...'``) is left as it is. The module imports
nothing heavy: ``pyg-dynscale --help`` stays fast.
"""
from __future__ import annotations

import re
from typing import Mapping, Optional

__all__ = ["FIELD_OPTIONS", "CLI_PHRASES", "for_cli", "option_for"]

_EVENT_SPLIT = {"val_ratio": "--val-ratio", "test_ratio": "--test-ratio", "val": "--val-ratio",
                "test": "--test-ratio", "batch_size": "--batch-size", "num_neighbors": "--num-neighbors"}

#: per subcommand: the API field or keyword -> the option that sets it (the one table of each; the
#: subcommands name a trainer's field by it, e.g. ``train --lags``' WindowTrainer errors)
FIELD_OPTIONS: dict[str, dict[str, str]] = {
    "train": {"lags": "--lags", "horizon": "--horizon", "stride": "--stride", "batch_size": "--batch-size",
              "blocks": "--blocks", "ratio": "--train-ratio", "split": "--train-ratio", "placement": "--placement",
              "train_ratio": "--train-ratio", "val_ratio": "--val-ratio", "feature_lags": "--feature-lags",
              "lr": "--lr", "hidden": "--hidden", "window": "--window", "recompute_every": "--recompute-every",
              "fusion": "--fusion", "scheme": "--scheme"},
    "train-events": {**_EVENT_SPLIT, "parallelism": "--parallelism", "partition": "--partition",
                     "memory_placement": "--memory-placement", "gradient_sync": "--gradient-sync",
                     "micro_batches": "--micro-batches", "event_placement": "--event-placement", "lr": "--lr",
                     "memory_dim": "--memory-dim", "time_dim": "--time-dim", "embedding_dim": "--embedding-dim",
                     "static_memory": "--static-memory", "memory_service": "--memory-service",
                     "prefetch": "--prefetch", "lr_scaling": "--lr-scaling"},
    "partition-events": {**_EVENT_SPLIT, "interval": "--interval", "slack": "--slack", "method": "--method",
                         "num_parts": "--parts"},
    "partition": {"num_parts": "--parts", "scheme": "--scheme", "window": "--window"},
    "inspect": {"window": "--window"},
}

#: API phrases -> what a command-line user does instead: ``"*"`` for every subcommand (fixes without an
#: option), then per subcommand (prose that names API arguments as words)
CLI_PHRASES: dict[str, tuple[tuple[str, str], ...]] = {
    "*": (
        ("a header row can be skipped with skip_rows=1, comment lines must start",
         "a header line and comment lines must start"),
        (", or pass allow_nonfinite=True if they are intended", ""),
        (", or pass allow_nonfinite=True to keep PyGT's NaN", ""),
        ("or pass sort=True (stable: ties keep file order)", "keeping the order of lines with equal times"),
        ("lower skip_rows", "remove the extra header lines"),
    ),
    "train": (  # WindowTrainer's decoder has no option: a horizon beyond the lags is refused
        ("field 'decoder': is None but ", ""),
        ("pass decoder='copy' (the encoder's architecture, its own parameters) or a decoder cell (seq2seq, "
         "DCRNN's encoder-decoder), or use horizon <= lags.", "use --horizon <= --lags (no decoder is trained "
                                                              "from the command line)."),
        ("horizon <= lags", "--horizon <= --lags"),
        ("use lags + horizon - 1 <=", "use --lags + --horizon - 1 <="),
    ),
}

_QUOTED = re.compile(r"('[^']*'|`[^`]*`)")
_FIELD = re.compile(r"field '([A-Za-z_][\w.]*)': |option '([A-Za-z_]\w*)' ")


def _field(options: Mapping[str, str], m: re.Match) -> str:
    """``field 'NAME': `` -> ``--option: ``; ``option 'NAME' `` (UnsupportedOptionError's) -> ``--option ``."""
    if m.group(1) is not None:
        return f"{options[m.group(1)]}: " if m.group(1) in options else m.group(0)
    return f"{options[m.group(2)]} " if m.group(2) in options else m.group(0)


def option_for(command: str, field: str, default: Optional[str] = None) -> Optional[str]:
    """The option of ``command`` that sets the API field ``field`` (``default`` if none)."""
    return FIELD_OPTIONS.get(command, {}).get(field, default)


def _keyword(options: Mapping[str, str], m: re.Match) -> str:
    opt, value = options[m.group(1)], m.group(2)
    if value == "True":
        return opt
    if value == "False":
        return f"no {opt}"
    return f"{opt} {value}"


def _rewrite(text: str, options: Mapping[str, str], named: str) -> str:
    """Keywords of ``options`` in unquoted ``text``: ``name=value`` and bare identifiers with an underscore
    (not those whose option the original line ``named`` already)."""
    if not options:
        return text
    names = "|".join(sorted(map(re.escape, options), key=len, reverse=True))
    text = re.sub(rf"\b({names})=([^\s,;:)]+?)(?=[\s,;:)]|\.?$|\.\s)", lambda m: _keyword(options, m), text)
    bare = [n for n in options if "_" in n and options[n] not in named]  # a line naming the option already: kept
    if bare:
        pattern = "|".join(sorted(map(re.escape, bare), key=len, reverse=True))
        text = re.sub(rf"(?<![\w-])({pattern})\b(?!=)", lambda m: options[m.group(1)], text)
    return text


def for_cli(message: object, command: str) -> str:
    r"""``message`` (an error or its text) as a line for a user of ``pyg-dynscale command``:
    the API fields and keywords it names replaced by ``command``'s options, the fixes
    without an option phrased for the command line.

    Example:
        >>> for_cli("field 'val': has no events. Fix: use a larger val_ratio / test_ratio.", "train-events")
        '--val-ratio: has no events. Fix: use a larger --val-ratio / --test-ratio.'
    """
    text = original = str(message)
    for api, cli in CLI_PHRASES["*"] + CLI_PHRASES.get(command, ()):
        text = text.replace(api, cli)
    options = FIELD_OPTIONS.get(command, {})
    text = _FIELD.sub(lambda m: _field(options, m), text)
    parts = _QUOTED.split(text)  # odd items: quoted, kept as written
    text = "".join(p if i % 2 else _rewrite(p, options, original) for i, p in enumerate(parts))
    return re.sub(r"(--[\w-]+): \1: ", r"\1: ", text)  # "--lags: field 'lags': ..." names it once
