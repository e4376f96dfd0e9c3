"""kopf's watch of a kind that answers 404 (controllers.kopf_vanished_kinds): the stream
pauses and starts again, where kopf as installed lets the error end its watcher."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import errors, watching
from kopf._cogs.structs import references

from controllers import kopf_vanished_kinds

KIND = references.Resource(group="gpuserve.io", version="v1alpha1", plural="inferenceservices")
EVENT = {"type": "ADDED", "object": {"metadata": {"name": "a"}}}


def flaky_stream(answers: list[str], calls: list[str]) -> Any:
    """A stand-in for the API server's side of one stream per call: "404" fails as the
    server does for a kind it does not serve, "event" yields one watch event."""

    async def stream(**kwargs: Any) -> AsyncIterator[Any]:
        answer = answers[len(calls)]
        calls.append(answer)
        if answer == "404":
            raise errors.APINotFoundError({"message": "404 page not found"}, status=404, headers={})
        yield EVENT

    return stream


async def watch(iterations: int) -> list[Any]:
    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0
    seen = []
    async for event in watching.infinite_watch(
        settings=settings, resource=KIND, namespace=None, _iterations=iterations
    ):
        seen.append(event)
    return seen


def test_a_404_pauses_the_stream_and_the_next_one_is_watched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(kopf_vanished_kinds, "KOPF_CONTINUOUS_WATCH",
                        flaky_stream(["404", "404", "event"], calls))
    monkeypatch.setattr(kopf_vanished_kinds, "NOT_SERVED_PAUSE_S", 0.01)
    monkeypatch.setattr(watching, "continuous_watch", watching.continuous_watch)
    assert kopf_vanished_kinds.install()  # undone by monkeypatch at the end
    seen = asyncio.run(asyncio.wait_for(watch(3), timeout=10))
    assert calls == ["404", "404", "event"]
    assert seen == [EVENT]


def test_the_pause_is_taken_before_the_next_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """No busy loop against an API server that keeps answering 404."""
    calls: list[str] = []
    monkeypatch.setattr(kopf_vanished_kinds, "KOPF_CONTINUOUS_WATCH",
                        flaky_stream(["404", "404", "404"], calls))
    monkeypatch.setattr(kopf_vanished_kinds, "NOT_SERVED_PAUSE_S", 0.2)
    monkeypatch.setattr(watching, "continuous_watch", watching.continuous_watch)
    assert kopf_vanished_kinds.install()
    loop = asyncio.new_event_loop()
    try:
        start = loop.time()
        loop.run_until_complete(watch(3))
        took = loop.time() - start
    finally:
        loop.close()
    assert calls == ["404", "404", "404"]
    assert took >= 3 * 0.2


def test_other_errors_still_end_the_watcher(monkeypatch: pytest.MonkeyPatch) -> None:
    async def forbidden(**kwargs: Any) -> AsyncIterator[Any]:
        raise errors.APIForbiddenError({"message": "forbidden"}, status=403, headers={})
        yield EVENT  # an async generator, as kopf's is

    monkeypatch.setattr(kopf_vanished_kinds, "KOPF_CONTINUOUS_WATCH", forbidden)
    monkeypatch.setattr(watching, "continuous_watch", watching.continuous_watch)
    assert kopf_vanished_kinds.install()
    with pytest.raises(errors.APIForbiddenError):
        asyncio.run(watch(1))


def test_kopf_as_installed_lets_the_404_end_its_watcher(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the patch changes: kopf's own stream lets the 404 out of infinite_watch (its
    orchestrator then re-raises it, and the operator stops)."""
    calls: list[str] = []
    monkeypatch.setattr(watching, "continuous_watch", flaky_stream(["404", "event"], calls))
    with pytest.raises(errors.APINotFoundError):
        asyncio.run(watch(2))
    assert calls == ["404"]


def test_a_kind_that_stays_unserved_warns_once_a_minute(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(kopf_vanished_kinds, "KOPF_CONTINUOUS_WATCH",
                        flaky_stream(["404", "404", "404", "event"], calls))
    monkeypatch.setattr(kopf_vanished_kinds, "NOT_SERVED_PAUSE_S", 0.0)
    monkeypatch.setattr(kopf_vanished_kinds, "_warned_at", {})
    monkeypatch.setattr(watching, "continuous_watch", watching.continuous_watch)
    assert kopf_vanished_kinds.install()
    with caplog.at_level(logging.WARNING, logger=kopf_vanished_kinds.__name__):
        assert asyncio.run(watch(4)) == [EVENT]
    warned = [r.getMessage() for r in caplog.records if "is not served" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "inferenceservices" in warned[0]
