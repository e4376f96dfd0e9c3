"""The standby rule the periodic loops follow (the same as kopf's peering pause)."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

from controllers.standby import Peering, outranked

NOW = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.UTC)


def peer(priority: int, seen_ago: float = 1.0, lifetime: int = 60) -> dict[str, object]:
    seen = NOW - datetime.timedelta(seconds=seen_ago)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


def test_alone_acts() -> None:
    assert not outranked({"me": peer(1)}, 1, NOW)


def test_a_live_higher_peer_outranks() -> None:
    assert outranked({"me": peer(0), "other": peer(1)}, 0, NOW)


def test_the_higher_peer_acts() -> None:
    assert not outranked({"me": peer(0), "other": peer(1)}, 1, NOW)


def test_a_dead_higher_peer_does_not_outrank() -> None:
    assert not outranked({"me": peer(0), "other": peer(5, seen_ago=120)}, 0, NOW)


def test_a_same_priority_peer_pauses_both() -> None:
    assert outranked({"me": peer(2), "other": peer(2)}, 2, NOW)


def test_a_missing_peering_object_means_standby() -> None:
    assert outranked(None, 0, NOW)


def test_malformed_entries_are_ignored() -> None:
    assert not outranked({"me": peer(0), "junk": {"priority": 9}, "x": "y"}, 0, NOW)


def settings(standalone: bool, mandatory: bool) -> SimpleNamespace:
    return SimpleNamespace(
        peering=SimpleNamespace(
            standalone=standalone, mandatory=mandatory, name="gs", priority=3, clusterwide=True
        )
    )


def test_standalone_operator_has_no_peering() -> None:
    assert Peering.from_settings(settings(standalone=True, mandatory=False)) is None
    assert Peering.from_settings(settings(standalone=False, mandatory=True)) == Peering(
        name="gs", priority=3, clusterwide=True
    )
