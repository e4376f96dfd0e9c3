"""Is this replica the one that acts? The periodic loops ask before they write.

kopf pauses its own watches and handlers while a live peer of higher priority exists, but
it does not pause work it did not start: the loops in ``controllers.periodic`` would keep
writing from a standby replica's (stale) indexes. This reads the same peering object kopf
uses and applies kopf's rule: stand by while the object is missing, while any live peer
outranks us, or while another live peer has our priority.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

from controllers import kube

log = logging.getLogger(__name__)
PEERING_API = "kopf.dev/v1"


@dataclass(frozen=True)
class Peering:
    name: str
    priority: int
    clusterwide: bool

    @classmethod
    def from_settings(cls, settings: Any) -> Peering | None:
        """None when the operator runs standalone (no peers, always acting)."""
        peering = settings.peering
        if peering.standalone or not peering.mandatory:
            return None
        return cls(name=peering.name, priority=peering.priority, clusterwide=peering.clusterwide)


def _live(info: dict[str, Any], now: datetime.datetime) -> bool:
    try:
        seen = datetime.datetime.fromisoformat(str(info["lastseen"]))
        lifetime = datetime.timedelta(seconds=int(info.get("lifetime", 60)))
    except (KeyError, ValueError, TypeError):
        return False
    if seen.tzinfo is None:
        seen = seen.replace(tzinfo=datetime.UTC)
    return seen + lifetime > now


def outranked(status: dict[str, Any] | None, priority: int, now: datetime.datetime) -> bool:
    """kopf's pause rule on a peering object's status ({identity: {priority, ...}})."""
    if status is None:
        return True  # kopf stays paused until it has seen its peering object
    live = [info for info in status.values() if isinstance(info, dict) and _live(info, now)]
    higher = any(int(info.get("priority", 0)) > priority for info in live)
    # Our own entry has our priority, so two or more of them means a same-priority peer.
    same = sum(1 for info in live if int(info.get("priority", 0)) == priority)
    return higher or same > 1


def standing_by(peering: Peering | None, namespace: str | None) -> bool:
    """True when another replica acts for objects of ``namespace`` (None: cluster-scoped)."""
    if peering is None:
        return False
    if peering.clusterwide:
        obj = kube.get(PEERING_API, "ClusterKopfPeering", peering.name)
    elif namespace is None:
        return False  # a namespaced operator's cluster-scoped work has no peering of its own
    else:
        obj = kube.get(PEERING_API, "KopfPeering", peering.name, namespace)
    status = None if obj is None else dict(obj.get("status") or {})
    return outranked(status, peering.priority, datetime.datetime.now(datetime.UTC))
