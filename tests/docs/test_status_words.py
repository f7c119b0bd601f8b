"""The README's status table is the one place that says what is planned: no
guide or notebook calls a feature "planned" or "not yet" built (such words
go stale the day the feature lands; the table is reviewed with every
change)."""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: "(planned)", "is / are planned", "not (yet) built", "not built yet", "not yet", "coming soon", "TODO"
STATUS_WORDS = re.compile(r"\(planned\b|\b(is|are|was) planned\b|\bnot (yet )?built\b|\bnot yet\b|"
                          r"\bcoming soon\b|\bTODO\b", re.IGNORECASE)


def _pages() -> list:
    pages = [(p.relative_to(ROOT), p.read_text()) for p in sorted((ROOT / "docs").glob("*.md"))]
    for nb in sorted((ROOT / "examples").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        pages.append((nb.relative_to(ROOT), "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")))
    return pages


def test_no_guide_calls_a_feature_planned_or_not_yet_built():
    hits = []
    for path, text in _pages():
        for i, line in enumerate(text.splitlines(), 1):
            if STATUS_WORDS.search(line):
                hits.append(f"{path}:{i}: {line.strip()}")
    assert not hits, "status words outside the README's status table:\n" + "\n".join(hits)


def test_the_check_can_fail():
    assert STATUS_WORDS.search("checkpointing over blocks of snapshots (planned, SC'21 §3.1)")
    assert STATUS_WORDS.search("the stale cache is not built yet")
    assert not STATUS_WORDS.search("a gradient row for every planned row")  # the plan's rows: another meaning
