"""docs/benchmarks.md carries copies of docs/bench-notes/: they must match."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_benchmarks_page_holds_the_notes_as_they_are() -> None:
    spec = importlib.util.spec_from_file_location("collect_notes", REPO / "bench/collect_notes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (REPO / "docs/benchmarks.md").read_text()
    assert page == module.collected(page), (
        "docs/benchmarks.md differs from docs/bench-notes/: edit the note, then run "
        ".venv/bin/python bench/collect_notes.py"
    )
