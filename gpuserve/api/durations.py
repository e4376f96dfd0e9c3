"""Durations as users write them in manifests ("2ms", "1.5s", "250us", "1m").

The same grammar is accepted by CEL's ``duration()`` in the API server, so a rule checked
at admission and the operator's own parsing agree.
"""

from __future__ import annotations

import re

# Go duration units that CEL's duration() understands and that make sense here.
_UNITS_S = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(us|ms|s|m|h))+$"
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(us|µs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Return seconds for a duration string, or raise ValueError naming the problem."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{text!r} is not a duration such as '2ms', '1.5s' or '250us'")
    return sum(float(num) * _UNITS_S[unit] for num, unit in _PART.findall(text))


def format_duration(seconds: float) -> str:
    """Shortest readable form of a duration, used in status and tables."""
    if seconds >= 1:
        return f"{seconds:.3g}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g}ms"
    return f"{seconds * 1e6:.3g}us"
