"""kopf's watch of a kind that answers 404 (controllers.kopf_vanished_kinds): the stream
pauses and starts again, where kopf as installed lets the error end its watcher."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import errors, watching
from kopf._cogs.structs import references

from controllers import kopf_vanished_kinds

KIND = references.Resource(group="gpuserve.io", version="v1alpha1", plural="inferenceservices")
EVENT = {"type": "ADDED", "object": {"metadata": {"name": "a"}}}
Stream = Callable[..., AsyncIterator[Any]]


def flaky_stream(answers: list[str], calls: list[str]) -> Stream:
    """A stand-in for the API server's side of one stream per call: "404" fails as the
    server does for a kind it does not serve, "event" yields one watch event."""

    async def stream(**kwargs: Any) -> AsyncIterator[Any]:
        answer = answers[len(calls)]
        calls.append(answer)
        if answer == "404":
            raise errors.APINotFoundError({"message": "404 page not found"}, status=404, headers={})
        yield EVENT

    return stream


@pytest.fixture
def patch_over(monkeypatch: pytest.MonkeyPatch) -> Callable[[Stream, float], None]:
    """Install the wrapper over ``stream`` (kopf's own stream in the operator), pausing
    ``pause_s``; monkeypatch undoes it, and the warning rate starts afresh."""

    def install(stream: Stream, pause_s: float) -> None:
        monkeypatch.setattr(kopf_vanished_kinds, "KOPF_CONTINUOUS_WATCH", stream)
        monkeypatch.setattr(kopf_vanished_kinds, "NOT_SERVED_PAUSE_S", pause_s)
        monkeypatch.setattr(kopf_vanished_kinds, "_warned_at", {})
        monkeypatch.setattr(watching, "continuous_watch", watching.continuous_watch)
        assert kopf_vanished_kinds.install()

    return install


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
    patch_over: Callable[[Stream, float], None],
) -> None:
    calls: list[str] = []
    patch_over(flaky_stream(["404", "404", "event"], calls), 0.01)
    seen = asyncio.run(asyncio.wait_for(watch(3), timeout=10))
    assert calls == ["404", "404", "event"]
    assert seen == [EVENT]


def test_the_pause_is_taken_before_the_next_stream(
    patch_over: Callable[[Stream, float], None],
) -> None:
    """No busy loop against an API server that keeps answering 404."""
    calls: list[str] = []
    patch_over(flaky_stream(["404", "404", "404"], calls), 0.2)
    loop = asyncio.new_event_loop()
    try:
        start = loop.time()
        loop.run_until_complete(watch(3))
        took = loop.time() - start
    finally:
        loop.close()
    assert calls == ["404", "404", "404"]
    assert took >= 3 * 0.2


def test_other_errors_still_end_the_watcher(
    patch_over: Callable[[Stream, float], None],
) -> None:
    async def forbidden(**kwargs: Any) -> AsyncIterator[Any]:
        raise errors.APIForbiddenError({"message": "forbidden"}, status=403, headers={})
        yield EVENT  # an async generator, as kopf's is

    patch_over(forbidden, 0.0)
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
    patch_over: Callable[[Stream, float], None], caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []
    patch_over(flaky_stream(["404", "404", "404", "event"], calls), 0.0)
    with caplog.at_level(logging.WARNING, logger=kopf_vanished_kinds.__name__):
        assert asyncio.run(watch(4)) == [EVENT]
    warned = [r.getMessage() for r in caplog.records if "is not served" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "inferenceservices" in warned[0]
