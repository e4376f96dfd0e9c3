"""Keeps an up-to-date map of the pods the runner may serve: list, then watch from there.

The watch is re-opened every ``WATCH_S`` seconds from the last resourceVersion (bounded
requests; a stop is noticed within that time) and the pods are re-listed after an error or
a 410 Gone.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from e2e.runner import kubeapi
from e2e.runner.podview import PodView, parse_pod

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)
WATCH_S = 10
RETRY_S = 1.0


class PodWatcher:
    """Calls ``on_change(views)`` with the full map (uid -> PodView) after every change."""

    def __init__(
        self,
        api: ApiClient,
        label_selector: str,
        on_change: Callable[[dict[str, PodView]], None],
        namespaces: frozenset[str] | None = None,
    ) -> None:
        self.api = api
        self.label_selector = label_selector
        self.on_change = on_change
        self.namespaces = namespaces
        self.views: dict[str, PodView] = {}
        self.synced = threading.Event()  # set after the first successful list
        self._stop = threading.Event()
        self._watch: Any = None
        self._thread = threading.Thread(target=self._run, name="runner-pod-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = WATCH_S + 5.0) -> None:
        self._stop.set()
        watch = self._watch
        resp = getattr(watch, "_resp", None) if watch is not None else None
        if resp is not None:  # unblocks the read instead of waiting for the server timeout
            with contextlib.suppress(Exception):
                resp.shutdown()
        self._thread.join(timeout=timeout)

    def _wanted(self, obj: dict[str, Any]) -> bool:
        namespace = (obj.get("metadata") or {}).get("namespace")
        return self.namespaces is None or namespace in self.namespaces

    def _publish(self) -> None:
        self.on_change(dict(self.views))

    def _relist(self) -> str:
        pods, version = kubeapi.list_pods(self.api, self.label_selector)
        self.views = {v.uid: v for v in (parse_pod(p) for p in pods if self._wanted(p)) if v.uid}
        self.synced.set()
        self._publish()
        return version

    def _run(self) -> None:
        from kubernetes import client, watch
        from kubernetes.client.exceptions import ApiException

        core = client.CoreV1Api(self.api)
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                self._watch = watch.Watch()  # type: ignore[no-untyped-call]
                for event in self._watch.stream(
                    core.list_pod_for_all_namespaces,
                    label_selector=self.label_selector,
                    resource_version=version,
                    timeout_seconds=WATCH_S,
                    allow_watch_bookmarks=True,
                    deserialize=False,
                    _request_timeout=WATCH_S + 5,
                ):
                    if self._stop.is_set():
                        break
                    version = self._apply(event) or version
            except ApiException as err:
                if err.status != 410:
                    log.warning("pod watch failed: %s", err)
                version = None
                self._stop.wait(RETRY_S)
            except Exception as err:  # connection reset, API server restarting...
                if not self._stop.is_set():
                    log.warning("pod watch interrupted: %s", err)
                    version = None
                    self._stop.wait(RETRY_S)

    def _apply(self, event: dict[str, Any]) -> str | None:
        kind = event.get("type")
        obj = event.get("object") or {}
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK" or not self._wanted(obj):
            return str(version) if version else None
        view = parse_pod(obj)
        if kind == "DELETED":
            self.views.pop(view.uid, None)
        elif kind in ("ADDED", "MODIFIED"):
            self.views[view.uid] = view
        self._publish()
        return str(version) if version else None
