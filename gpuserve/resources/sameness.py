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

_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
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
