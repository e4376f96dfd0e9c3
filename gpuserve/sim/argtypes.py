"""argparse types for the numbers a replay takes: a bad value is refused at the command
line, naming the flag, instead of failing deep in a run or running on nonsense (a
compression of nan plays every arrival at once)."""

from __future__ import annotations

import argparse
import math
from typing import TypeVar

T = TypeVar("T", int, float)


def finite_number(text: str) -> float:
    """Any finite number (a bound of its own is checked by the caller)."""
    return _finite(text)


def positive_number(text: str) -> float:
    """A finite number above zero (a time compression)."""
    return _checked(_finite(text), text, 0, inclusive=False)


def non_negative_number(text: str) -> float:
    """A finite number of zero or more (seconds of warm-up)."""
    return _checked(_finite(text), text, 0, inclusive=True)


def non_negative_int(text: str) -> int:
    """A whole number of zero or more (tokens per batch item, 0 = one item a request)."""
    return _checked(_whole(text), text, 0, inclusive=True)


def positive_int(text: str) -> int:
    """A whole number of one or more (seeds)."""
    return _checked(_whole(text), text, 1, inclusive=True)


def _checked(value: T, text: str, low: int, *, inclusive: bool) -> T:
    if value < low or (value == low and not inclusive):
        bound = f"at least {low}" if inclusive else f"above {low}"
        raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
    return value


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be finite, got {text}")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
