"""Does a live object already hold every field gpuserve would apply?

Server-side apply of an unchanged object is still a write request; comparing first lets a
steady-state reconcile send none. The API server adds defaults and normalises resource
quantities ("0.5" becomes "500m"), so the check is "desired is contained in live", with
quantities compared by value.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

# Decimal suffixes are powers of ten, binary ones powers of two (Kubernetes quantities).
_SUFFIX = {
    **{k: Decimal(10) ** e for k, e in zip(("n", "u", "m", ""), (-9, -6, -3, 0), strict=True)},
    **{k: Decimal(10) ** (3 * i) for i, k in enumerate("kMGTPE", start=1)},
    **{f"{k}i": Decimal(2) ** (10 * i) for i, k in enumerate("KMGTPE", start=1)},
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def parse_quantity(text: str) -> Decimal | None:
    """Value of a Kubernetes quantity string, or None if it is not one."""
    match = _QUANTITY.match(text)
    if not match:
        return None
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2) or ""]
    except InvalidOperation:
        return None


def _same_scalar(live: Any, desired: Any) -> bool:
    if live == desired:
        return True
    if isinstance(live, str | int) and isinstance(desired, str | int):
        a, b = parse_quantity(str(live)), parse_quantity(str(desired))
        return a is not None and a == b
    return False


def contains(live: Any, desired: Any) -> bool:
    """True when every field of ``desired`` is present in ``live`` with the same value."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            key in live and contains(live[key], value) for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(live) == len(desired)
            and all(contains(a, b) for a, b in zip(live, desired, strict=True))
        )
    return _same_scalar(live, desired)
