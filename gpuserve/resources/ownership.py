"""The part of a live object one field manager owns, read from its managedFields.

The operator keeps every child it applied in memory (kopf indexes) only to ask "does the
live object already hold what I would apply?". Server-side apply records, per field
manager, the exact set of fields it set (``managedFields[].fieldsV1``). Keeping just that
part answers the question as well as the whole object does — a field someone else changed
is no longer ours, so it goes missing and the child is re-applied — and it drops what the
API server adds (defaults, status, clusterIP, ...), which is most of a Deployment.

fieldsV1 keys: ``f:<name>`` a map field, ``k:<json>`` a list item matched by its key
fields, ``v:<json>`` a set item by value, ``i:<n>`` a list item by position, ``.`` the
item itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Always kept: what indexes and log lines name the object by.
_IDENTITY = ("name", "namespace", "uid")


def _item_matches(item: Any, key: str) -> bool:
    kind, _, raw = key.partition(":")
    try:
        wanted = json.loads(raw)
    except ValueError:
        return False
    if kind == "k":
        return isinstance(item, Mapping) and isinstance(wanted, dict) and all(
            item.get(k) == v for k, v in wanted.items()
        )
    return bool(kind == "v" and item == wanted)


def _prune(value: Any, fields: Mapping[str, Any]) -> Any:
    members = {k: v for k, v in fields.items() if k != "."}
    if not members:
        return value  # a leaf (or an atomic value): owned whole
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, sub in members.items():
            if key.startswith("f:") and key[2:] in value:
                out[key[2:]] = _prune(value[key[2:]], sub or {})
        return out
    if isinstance(value, list):
        kept: list[Any] = []
        for position, item in enumerate(value):
            for key, sub in members.items():
                if key == f"i:{position}" or (key[:2] in ("k:", "v:") and _item_matches(item, key)):
                    kept.append(_prune(item, sub or {}))
                    break
        return kept
    return value


def owned_part(obj: Mapping[str, Any], manager: str) -> dict[str, Any] | None:
    """The fields of ``obj`` that ``manager`` set by server-side apply, plus apiVersion,
    kind and the object's identity; None when the manager has no apply entry (then the
    caller has to keep the whole object)."""
    meta = obj.get("metadata") or {}
    entries = [
        e
        for e in meta.get("managedFields") or []
        if e.get("manager") == manager
        and e.get("operation") == "Apply"
        and not e.get("subresource")
        and isinstance(e.get("fieldsV1"), Mapping)
    ]
    if not entries:
        return None
    out: dict[str, Any] = {}
    for entry in entries:
        pruned = _prune(obj, entry["fieldsV1"])
        out.update(pruned if isinstance(pruned, dict) else {})
    for key in ("apiVersion", "kind"):
        if key in obj:
            out[key] = obj[key]
    owned_meta = dict(out.get("metadata") or {})
    owned_meta.update({k: meta[k] for k in _IDENTITY if k in meta})
    out["metadata"] = owned_meta
    return out
