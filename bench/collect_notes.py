"""Rebuild the second half of docs/benchmarks.md from docs/bench-notes/*.md.

    .venv/bin/python bench/collect_notes.py

The hand-written part (summary, reconcile latency, the demo) ends at the marker line; every
note follows it with its headings one level down, in the order below.
"""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
MARKER = "<!-- The notes below are copied from docs/bench-notes/ by bench/collect_notes.py. -->"
ORDER = (
    "cluster", "triton", "loop", "warm-pool", "autoscaling", "reliability", "scale-memory",
    "llm-capacity", "gpu-engine-timing",
)


def demoted(text: str) -> str:
    lines = [("#" + line) if line.startswith("#") else line for line in text.splitlines()]
    # The notes link to each other and to ../; from docs/ those become bench-notes/ and ./.
    out = "\n".join(lines).replace("](../", "](").replace("](loop.md", "](bench-notes/loop.md")
    return out.strip() + "\n"


def collected(current: str) -> str:
    """``current`` (the text of docs/benchmarks.md) with everything after the marker line
    replaced by the notes. A test compares it with the file, so a note edited without
    rerunning this script is caught (and nothing is written only into the copy)."""
    head, found, _ = current.partition(MARKER)
    if not found:
        raise SystemExit("docs/benchmarks.md: marker line not found")
    notes = [demoted((DOCS / "bench-notes" / f"{name}.md").read_text()) for name in ORDER]
    return head + MARKER + "\n\n" + "\n---\n\n".join(notes)


def main() -> int:
    target = DOCS / "benchmarks.md"
    target.write_text(collected(target.read_text()))
    print(f"wrote {target} ({len(ORDER)} notes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
