"""The operator's per-object state: keyed by UID, dropped when the object goes; writes in
flight are not repeated until kopf's index shows them (or a bound passes)."""

from __future__ import annotations

import time

import pytest

from controllers.settings import Settings, SettingsError
from controllers.state import OperatorState, PerObject, RecentWrites, uid_of


def test_state_is_per_uid_and_forgotten_when_the_object_goes() -> None:
    state = OperatorState.start(Settings())
    old = {"metadata": {"name": "chat", "namespace": "ml", "uid": "u1"}}
    again = {"metadata": {"name": "chat", "namespace": "ml", "uid": "u2"}}
    state.scaling.get(uid_of(old)).quiet = ("gen", 1)
    # The same name, created again: a new object with nothing remembered.
    assert state.scaling.get(uid_of(again)).quiet is None
    state.retain([uid_of(again)])
    assert len(state.scaling) == 1 and state.scaling.get(uid_of(old)).quiet is None


def test_per_object_values_are_created_once() -> None:
    made: list[int] = []
    values: PerObject[list[int]] = PerObject(lambda: made.append(1) or [])
    assert values.get("a") is values.get("a") and len(made) == 1
    assert values.retain(["b"]) == 1 and len(values) == 0


def test_a_write_is_in_flight_until_the_index_shows_it() -> None:
    writes = RecentWrites()
    key = ("Pod", "p")
    assert not writes.in_flight(key, ("serving", "100"))
    writes.record(key, ("serving", "100"))
    assert writes.in_flight(key, ("serving", "100"))
    # Another wanted value is a new decision, not the write in flight.
    assert not writes.in_flight(key, ("warm", "0"))
    writes.record(key, ("serving", "100"))
    writes.forget(key)  # caught up
    assert not writes.in_flight(key, ("serving", "100"))  # and forgotten


def test_a_write_the_index_never_shows_is_sent_again_after_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes = RecentWrites()
    writes.record(("Pod", "p"), "x")
    later = time.monotonic() + RecentWrites.IN_FLIGHT_SECONDS + 1
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert not writes.in_flight(("Pod", "p"), "x")


def test_entries_past_the_bound_are_dropped_when_another_write_is_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes = RecentWrites()
    writes.record(("Pod", "gone"), "x")  # a pod that is deleted and never patched again
    later = time.monotonic() + RecentWrites.IN_FLIGHT_SECONDS + 1
    monkeypatch.setattr(time, "monotonic", lambda: later)
    writes.record(("Pod", "new"), "y")
    assert len(writes) == 1 and writes.in_flight(("Pod", "new"), "y")


def test_settings_name_the_variable_of_a_bad_value() -> None:
    env = {"GPUSERVE_AUTOSCALE_INTERVAL": "fast"}
    with pytest.raises(SettingsError, match="GPUSERVE_AUTOSCALE_INTERVAL='fast': not a number"):
        Settings.from_environment(env)
    with pytest.raises(SettingsError, match="GPUSERVE_EXTRA_POD_LABELS: 'oops' is not key=value"):
        Settings.from_environment({"GPUSERVE_EXTRA_POD_LABELS": "a=b,oops"})
    ok = Settings.from_environment(
        {"GPUSERVE_PROMETHEUS_URL": " http://p:9090 ", "GPUSERVE_EXTRA_POD_LABELS": "a=b, c=d"}
    )
    assert ok.prometheus_url == "http://p:9090"
    assert dict(ok.extra_pod_labels) == {"a": "b", "c": "d"}
    assert Settings().keda_prometheus_url == "http://prometheus.monitoring:9090"
