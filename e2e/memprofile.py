"""Where a process's memory is at its high-water mark, from a memray capture.

memray (https://bloomberg.github.io/memray/) records every allocation of the operator
with little slowdown in ``--aggregate`` mode, and reports the allocations still live at
the moment the heap was largest. This module starts the operator under it and folds the
report into two lists: by the innermost frame in the operator's or a library's code (who
allocated), and inclusive by the operator's and kopf's frames (on whose behalf).
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# Frames worth naming; the interpreter's own (asyncio, ssl, json) are attributed to the
# nearest of these further out.
_LIBRARIES = re.compile(r"/(controllers|gpuserve|kopf|kubernetes|pydantic|aiohttp|urllib3)/")
_OURS = re.compile(r"^(controllers|gpuserve|kopf)/")


def memray_launcher(capture: Path) -> tuple[str, ...]:
    """Interpreter arguments that run the next ``-m module`` under memray."""
    return ("-m", "memray", "run", "--aggregate", "--force", "-o", str(capture))


@dataclass(frozen=True)
class HighWaterMark:
    total_mib: float
    by_allocator: list[tuple[str, float]]  # innermost named frame -> MiB
    by_caller: list[tuple[str, float]]  # operator / kopf frame, inclusive -> MiB


def _frame_name(frame: str) -> str | None:
    parts = frame.split(";")
    if len(parts) < 2 or not _LIBRARIES.search(parts[1]):
        return None
    path = _LIBRARIES.split(parts[1], maxsplit=1)
    return f"{parts[0]} ({path[1]}/{path[2]})"


def high_water_mark(capture: Path, limit: int = 15) -> HighWaterMark:
    with tempfile.TemporaryDirectory(prefix="gpuserve-memray-") as tmp:
        table = Path(tmp) / "peak.csv"
        subprocess.run(
            [sys.executable, "-m", "memray", "transform", "csv", str(capture), "-o",
             str(table), "--force"],
            check=True, capture_output=True, timeout=600,
        )
        csv.field_size_limit(1 << 30)
        with table.open(newline="") as handle:
            rows = [(int(row["size"]), row["stack_trace"]) for row in csv.DictReader(handle)]
    total = 0
    allocator: Counter[str] = Counter()
    caller: Counter[str] = Counter()
    for size, stack in rows:  # innermost frame first
        total += size
        names = [name for frame in stack.split("|") if (name := _frame_name(frame))]
        allocator[names[0] if names else "(interpreter start-up)"] += size
        for name in dict.fromkeys(names):
            if _OURS.match(name.split("(", 1)[1]):
                caller[name] += size
    mib = 2.0**20
    return HighWaterMark(
        total_mib=total / mib,
        by_allocator=[(n, s / mib) for n, s in allocator.most_common(limit)],
        by_caller=[(n, s / mib) for n, s in caller.most_common(limit)],
    )


def print_high_water_mark(mark: HighWaterMark) -> None:
    print(f"\nheap at its high-water mark (memray): {mark.total_mib:.1f} MiB\n")
    for title, rows in (("allocated in", mark.by_allocator), ("on behalf of", mark.by_caller)):
        print(f"| {title} | MiB |")
        print("|---|---|")
        for name, size in rows:
            print(f"| `{name}` | {size:.1f} |")
        print()
