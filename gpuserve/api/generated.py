"""Write generated files, or check that the committed ones are current (drift fails CI)."""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(files: dict[Path, str], *, check: bool, what: str, make_target: str) -> int:
    """Write ``files`` (path -> text), or with ``check`` return 1 if any differs on disk."""
    stale = [str(p) for p, text in files.items() if not p.exists() or p.read_text() != text]
    if check:
        if stale:
            stale_list = ", ".join(stale)
            print(f"{what} out of date: {stale_list}; run `make {make_target}`", file=sys.stderr)
            return 1
        print(f"{what} up to date ({len(files)} files)")
        return 0
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"wrote {len(files)} {what} file(s) ({len(stale)} changed)")
    return 0
