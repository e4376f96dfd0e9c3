"""The rows of the two trace formats, read and checked once for every parser.

Azure's CSV (columns ``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``) and Mooncake's
JSON lines feed both the request-level simulator (``gpuserve.sim.workload``) and the
token-level one (``gpuserve.sim.llm.traces``); each turns these rows into its own requests.

Parsing takes lines, never paths (gpuserve/ does no I/O). Every error is a ValueError that
starts with the line of the input as given (1-based: an Azure header is line 1) and names
the column or field at fault, so a user can find the row in an editor.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TypeVar

N = TypeVar("N", int, float)

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True, slots=True)
class AzureRow:
    line: int  # of the input, 1-based
    at: float  # seconds since the earliest row
    context_tokens: int
    generated_tokens: int


@dataclass(frozen=True, slots=True)
class _Stamped:
    line: int
    stamp: datetime | float  # a date-time (with its offset, if any) or seconds
    context_tokens: int
    generated_tokens: int


def is_mooncake(lines: Sequence[str]) -> bool:
    """Whether the trace is Mooncake's JSON lines (its first non-blank line an object)
    rather than Azure's CSV: told by the content, so a file's name does not matter."""
    _, first = next(_non_blank(lines), (0, ""))
    return first.startswith("{")


def read_azure_rows(lines: Iterable[str]) -> list[AzureRow]:
    """The rows under the header, sorted by time, the clock starting at the earliest.

    The header names the columns, in any order and any case (``context_tokens`` counts as
    ``ContextTokens``); other columns are ignored. Cells may be quoted, and the separator
    is the header's: a comma, a tab or a semicolon. TIMESTAMP is an ISO date-time
    (``2023-11-16 18:15:46.6805900``; an offset is converted to UTC) or a number of
    seconds, the same kind on every row, and an offset on every date-time or on none; the
    token columns are whole numbers >= 0; blank lines are skipped. No lines at all give no
    rows (the caller says "no requests").
    """
    content = _non_blank(lines)
    header = next(content, None)
    if header is None:
        return []
    layout = _layout(*header)
    return _from_earliest([_azure_row(number, text, layout) for number, text in content])


def _non_blank(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(lines, 1):
        # A byte-order mark some editors write ahead of the first line is no content.
        if text := (line.removeprefix("\ufeff") if number == 1 else line).strip():
            yield number, text


@dataclass(frozen=True, slots=True)
class _Layout:
    delimiter: str
    columns: tuple[int, int, int]  # where TIMESTAMP, ContextTokens, GeneratedTokens are


def _cells(number: int, text: str, delimiter: str) -> list[str]:
    try:
        row = next(csv.reader([text], delimiter=delimiter, skipinitialspace=True))
    except csv.Error as exc:  # e.g. a cell past the csv module's field size limit
        raise ValueError(f"line {number}: {exc}") from None
    return [cell.strip() for cell in row]


def _column_key(name: str) -> str:
    return name.lower().replace("_", "").replace(" ", "")


def _layout(number: int, text: str) -> _Layout:
    """Where the three columns are, by their names in the header (a spreadsheet's export
    may reorder, add or quote columns), and the separator under which all three are found
    (another separator may sit inside a quoted name)."""
    wanted = [_column_key(name) for name in AZURE_COLUMNS]
    missing: list[str] = []
    for delimiter in (",", "\t", ";"):
        keys = [_column_key(cell) for cell in _cells(number, text, delimiter)]
        absent = [name for name, key in zip(AZURE_COLUMNS, wanted, strict=True) if key not in keys]
        if absent:
            missing = missing or absent
            continue
        twice = [
            name for name, key in zip(AZURE_COLUMNS, wanted, strict=True) if keys.count(key) > 1
        ]
        if twice:
            raise ValueError(f"line {number}: header: column {' and '.join(twice)} given twice")
        found = tuple(keys.index(key) for key in wanted)
        return _Layout(delimiter, (found[0], found[1], found[2]))
    raise ValueError(
        f"line {number}: header: no column {' or '.join(missing)} in {text!r} "
        f"(expected {', '.join(AZURE_COLUMNS)}, in any order)"
    )


def _azure_row(number: int, text: str, layout: _Layout) -> _Stamped:
    cells = _cells(number, text, layout.delimiter)
    last = max(layout.columns)
    if len(cells) <= last:
        raise ValueError(
            f"line {number}: expected {last + 1} columns "
            f"({AZURE_COLUMNS[layout.columns.index(last)]} is column {last + 1} of the "
            f"header), got {len(cells)}"
        )
    stamp, context, generated = (cells[k] for k in layout.columns)
    return _Stamped(
        number,
        _timestamp(number, stamp),
        _whole_cell(number, AZURE_COLUMNS[1], context),
        _whole_cell(number, AZURE_COLUMNS[2], generated),
    )


def _timestamp(number: int, text: str) -> datetime | float:
    # Seconds first: a bare number such as 20231116 is also an ISO basic date.
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds):
            return seconds
    try:
        parsed = datetime.fromisoformat(text)  # 3.11 reads Azure's seven digits
    except ValueError:
        raise ValueError(
            f"line {number}: {AZURE_COLUMNS[0]}: {text!r} is neither a date-time nor seconds"
        ) from None
    return parsed


def _whole_cell(number: int, column: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"line {number}: {column}: {text!r} is not a whole number") from None
    if value < 0:
        raise ValueError(f"line {number}: {column}: {value} is negative")
    return value


def _from_earliest(rows: list[_Stamped]) -> list[AzureRow]:
    """Seconds since the earliest row (not the first: a trace may be out of order),
    counted in whole microseconds for date-times so no epoch-sized float rounds them."""
    if not rows:
        return []
    dates = [r.stamp for r in rows if isinstance(r.stamp, datetime)]
    numbers = [r.stamp for r in rows if not isinstance(r.stamp, datetime)]
    if dates and numbers:
        kind = isinstance(rows[0].stamp, datetime)
        odd = next(r for r in rows if isinstance(r.stamp, datetime) != kind)
        raise ValueError(
            f"line {odd.line}: {AZURE_COLUMNS[0]}: "
            f"{'seconds' if kind else 'a date-time'} where line {rows[0].line} has "
            f"{'a date-time' if kind else 'seconds'}; use one kind for every row"
        )
    if dates:
        aware = [d.tzinfo is not None for d in dates]
        if any(aware) and not all(aware):
            # Without an offset a time is read as UTC: a trace in another zone would gain
            # hours between the rows that state theirs and those that do not.
            odd = next(
                r
                for r in rows
                if isinstance(r.stamp, datetime) and (r.stamp.tzinfo is not None) != aware[0]
            )
            raise ValueError(
                f"line {odd.line}: {AZURE_COLUMNS[0]}: "
                f"{'no UTC offset' if aware[0] else 'a UTC offset'} where line {rows[0].line} "
                f"has {'one' if aware[0] else 'none'}; give every row an offset or none"
            )
        utc = [d.astimezone(UTC).replace(tzinfo=None) if d.tzinfo else d for d in dates]
        start = min(utc)
        ats = [(d - start).total_seconds() for d in utc]
    else:
        first = min(numbers)
        ats = [s - first for s in numbers]
    out = [
        AzureRow(r.line, at, r.context_tokens, r.generated_tokens)
        for r, at in zip(rows, ats, strict=True)
    ]
    out.sort(key=lambda r: r.at)  # stable: rows at the same time keep the file's order
    return out


@dataclass(frozen=True, slots=True)
class MooncakeRow:
    line: int  # of the input, 1-based
    at_s: float  # seconds since the earliest row's timestamp
    input_length: int | None  # None where the line has no such field
    output_length: int | None
    hash_ids: tuple[int, ...]


def read_mooncake_rows(lines: Iterable[str]) -> list[MooncakeRow]:
    """One row per non-blank line, sorted by time (rows at the same time in the file's
    order), the clock starting at the earliest: a JSON object with ``timestamp`` (ms, a
    number >= 0), and optionally ``input_length`` and ``output_length`` (whole numbers >= 0;
    the callers decide whether they are required) and ``hash_ids`` (a list of whole
    numbers). Other fields are ignored."""
    rows = [_mooncake_row(number, text) for number, text in _non_blank(lines)]
    rows.sort(key=lambda row: row.at_s)
    # Epoch milliseconds counted from the earliest, so a trace need not start at 0.
    start = rows[0].at_s if rows else 0.0
    return [replace(row, at_s=row.at_s - start) for row in rows]


def _mooncake_row(number: int, text: str) -> MooncakeRow:
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"line {number}: not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise ValueError(f"line {number}: expected a JSON object, got {_shown(body)}")
    if "timestamp" not in body:
        raise ValueError(f"line {number}: missing field 'timestamp'")
    lengths = {
        name: _whole_field(number, name, body[name])
        for name in ("input_length", "output_length")
        if name in body
    }
    return MooncakeRow(
        number,
        _timestamp_ms(number, body["timestamp"]) / 1000.0,  # in s; from the earliest below
        lengths.get("input_length"),
        lengths.get("output_length"),
        _hash_ids(number, body.get("hash_ids", [])),
    )


def _timestamp_ms(number: int, value: object) -> float:
    return _non_negative(number, "timestamp", value, _finite(value), "a number")


def _finite(value: object) -> float | None:
    """A JSON number as a float; None for anything else (true is no number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        as_float = float(value)
    except OverflowError:  # an integer beyond any float
        return None
    return as_float if math.isfinite(as_float) else None


def _whole_field(number: int, name: str, value: object) -> int:
    return _non_negative(number, name, value, _whole(value), "a whole number")


def _non_negative(number: int, name: str, value: object, parsed: N | None, kind: str) -> N:
    """``parsed`` (``value`` read as ``kind``), or an error naming the line and field."""
    if parsed is None:
        raise ValueError(f"line {number}: {name}: {_shown(value)} is not {kind}")
    if parsed < 0:
        raise ValueError(f"line {number}: {name}: {_shown(value)} is negative")
    return parsed


def _hash_ids(number: int, value: object) -> tuple[int, ...]:
    ids = [_whole(h) for h in value] if isinstance(value, list) else [None]
    if any(h is None for h in ids):
        raise ValueError(
            f"line {number}: hash_ids: expected a list of whole numbers, got {_shown(value)}"
        )
    return tuple(h for h in ids if h is not None)


def _whole(value: object) -> int | None:
    """A JSON whole number (``12`` or ``12.0``); None for anything else (true is no number)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _shown(value: object) -> str:
    """A value as the file spells it, cut short: the user looks for it there."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
