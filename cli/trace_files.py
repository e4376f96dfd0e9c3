"""Reading a trace file for `gpuserve simulate` and the benches: its text, whatever
encoding a spreadsheet saved it in, and a note on a quiet spell that spans most of it."""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

# A quiet spell longer than this share of the trace's span is worth a word: one mistyped
# date makes a trace of minutes last a day (and its simulation take that long).
QUIET_SHARE = 0.5
# A spell under a minute slows no simulation, and between two arrivals any spell is all of
# the span: neither is worth a word.
MIN_QUIET_S = 60.0


def trace_lines(path: Path) -> list[str]:
    """The file's lines: UTF-8 (with or without a byte-order mark), or UTF-16 or UTF-32
    where a byte-order mark says so (a spreadsheet's "Unicode text"). Raises OSError as
    reading does, and ValueError saying how to fix text in another encoding."""
    data = path.read_bytes()
    # UTF-32's little-endian mark begins with UTF-16's: it is looked for first.
    if data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        encoding = "utf-32"
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    elif b"\x00" in data[:4096]:
        raise ValueError(
            "holds NUL bytes, as UTF-16 or UTF-32 text without a byte-order mark does: save "
            "the trace as UTF-8"
        )
    else:
        encoding = "utf-8-sig"
    try:
        return data.decode(encoding).splitlines()
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"not {encoding.upper().removesuffix('-SIG')} text (byte {exc.start} is "
            f"{data[exc.start : exc.start + 1]!r}): save the trace as UTF-8"
        ) from None


def quiet_note(times: Sequence[float]) -> str | None:
    """A warning when no request arrives for more than half the trace's span (arrival
    times in the trace's own seconds, before any compression), saying where; None
    otherwise."""
    arrivals = sorted(times)
    if len(arrivals) < 3 or arrivals[-1] <= arrivals[0]:
        return None
    span = arrivals[-1] - arrivals[0]
    gap, start = max((b - a, a) for a, b in pairwise(arrivals))
    if gap <= QUIET_SHARE * span or gap < MIN_QUIET_S:
        return None
    return (
        f"note: no request arrives for {gap:.0f}s, from {start - arrivals[0]:.0f}s into the "
        f"trace ({gap / span:.0%} of its {span:.0f}s): a mistyped timestamp stretches a "
        "trace that way; check the rows around it"
    )
