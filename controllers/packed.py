"""Index entries kept as compact JSON text, parsed again when read.

kopf's indexes hold whatever the index functions return, for every object, for the life
of the operator: they are the operator's steady-state memory. A parsed Kubernetes object
is a tree of dicts, lists and strings several times the size of its JSON text; kept as
compact UTF-8 bytes it is one object. A reconcile reads a handful of entries, so parsing
them again costs far less than keeping thousands of trees.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Packed:
    data: bytes

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Packed:
        """Raises TypeError for anything that is not plain JSON data (a kopf.Body is a
        view, not a dict: ``dict(body)`` first), rather than keeping its repr."""
        return cls(json.dumps(obj, separators=(",", ":")).encode())

    def unpack(self) -> dict[str, Any]:
        obj: dict[str, Any] = json.loads(self.data)
        return obj


def unpacked(stores: Iterable[Iterable[Packed]]) -> list[dict[str, Any]]:
    """Every entry of an index's stores, parsed (copies: kopf keeps filling the index)."""
    return [entry.unpack() for store in list(stores) for entry in list(store)]
