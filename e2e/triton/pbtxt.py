"""Small helpers on config.pbtxt text that must work even on configs Triton would reject."""

from __future__ import annotations

import re

_OPEN = "{[<"
_CLOSE = "}]>"
_NAME_AT = re.compile(r"name\s*:?\s*(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')")


def top_level_name(config_pbtxt: str) -> str | None:
    """The ``name`` field at nesting depth 0 (inputs/outputs also have names), or None.

    Scans characters, skipping strings and ``#`` comments, so it works on configs a protobuf
    parser would refuse - the validator still needs the model directory name for those.
    """
    depth = 0
    i, n = 0, len(config_pbtxt)
    while i < n:
        ch = config_pbtxt[i]
        if ch == "#":
            end = config_pbtxt.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if ch in "\"'":
            i = _skip_string(config_pbtxt, i)
            continue
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
        elif (
            depth == 0
            and config_pbtxt.startswith("name", i)
            and (i == 0 or not (config_pbtxt[i - 1].isalnum() or config_pbtxt[i - 1] == "_"))
        ):
            match = _NAME_AT.match(config_pbtxt, i)
            if match:
                return match.group(1)[1:-1]
        i += 1
    return None


def _skip_string(text: str, start: int) -> int:
    quote = text[start]
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == quote or text[i] == "\n":
            return i + 1
        i += 1
    return i
