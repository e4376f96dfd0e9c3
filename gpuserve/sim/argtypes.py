"""argparse types for the numbers a replay takes: a bad value is refused at the command
line, naming the flag, instead of failing deep in a run or running on nonsense (a
compression of nan plays every arrival at once)."""

from __future__ import annotations

import argparse
import math


def positive_number(text: str) -> float:
    """A finite number above zero (a time compression)."""
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def non_negative_number(text: str) -> float:
    """A finite number of zero or more (seconds of warm-up)."""
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """A whole number of zero or more (tokens per batch item, 0 = one item a request)."""
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, got {text}")
    return value


def positive_int(text: str) -> int:
    """A whole number of one or more (seeds)."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
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
