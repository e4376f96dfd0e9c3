"""LocalRunner: plays the kubelet's container part for Triton pods on the local cluster.

For every pod of an InferenceService that is bound, Running and labelled
``gpuserve.io/readiness=external`` it starts a real tritonserver on loopback with the pod's
rendered config.pbtxt and flags, sets the pod Ready when the model is ready (NotReady when
the process dies, and restarts it after a back-off), and on deletion takes it out of the
serving endpoints, waits ``drain_delay_s`` (as a preStop sleep would, so clients see the
change first) and stops Triton with SIGTERM so in-flight requests finish within its exit
timeout. Prometheus file_sd targets follow the running servers.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from e2e.runner import kubeapi
from e2e.runner.flags import translate_args
from e2e.runner.instance import PodInstance
from e2e.runner.modelrepo import write_pod_repository
from e2e.runner.podview import PodView
from e2e.runner.targets import InstanceInfo, scrape_targets, serving_endpoints
from e2e.startstop import StartStop
from e2e.triton import find_triton

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)
LABEL_SELECTOR = "gpuserve.io/readiness=external,gpuserve.io/service"
PATCH_RETRY_S = 1.0


class TargetSink(Protocol):
    def set_targets(self, targets: list[dict[str, Any]]) -> None: ...


@dataclass(frozen=True)
class RunnerSettings:
    """Knobs of the runner; the defaults suit tests on a 2-core machine."""

    namespaces: frozenset[str] | None = None  # None: every namespace
    start_timeout_s: float = 60.0
    probe_interval_s: float = 0.5  # how often running servers are health-checked
    drain_delay_s: float = 1.0  # endpoint removal -> SIGTERM (a preStop sleep)
    max_restarts: int = 3
    restart_backoff_s: float = 2.0  # doubled per restart
    workers: int = 3  # concurrent starts/stops
    log_dir: Path | None = None  # keep Triton logs here (default: a temp dir removed at stop)


@dataclass(frozen=True)
class RunnerEvent:
    """A step of one pod's life, for benchmarks and debugging."""

    at: float  # time.monotonic()
    wall: float  # time.time()
    namespace: str
    pod: str
    what: str  # started | triton-ready | pod-ready | pod-not-ready | draining | stopped | failed
    detail: str = ""


class LocalRunner(StartStop):
    """Watches pods and runs their Tritons until ``stop()`` (or the ``with`` block) ends."""

    def __init__(
        self,
        kubeconfig: Path,
        *,
        prometheus: TargetSink | None = None,
        settings: RunnerSettings = RunnerSettings(),
    ) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.settings = settings
        self._sink = prometheus
        self._api: ApiClient | None = None
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._views: dict[str, PodView] = {}
        self._instances: dict[str, PodInstance] = {}
        self._last_patch: dict[str, tuple[bool, float]] = {}
        self._last_probe = 0.0
        self._healthy: dict[str, bool] = {}
        self._targets: list[dict[str, Any]] | None = None
        self._storage_cache: dict[tuple[str, str], str] = {}
        self.events: deque[RunnerEvent] = deque(maxlen=20_000)
        self._workdir: Path | None = None
        self._own_workdir = False
        self._executor: ThreadPoolExecutor | None = None
        self._watcher: Any = None
        self._loop: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self, sync_timeout: float = 30.0) -> LocalRunner:
        from e2e.runner.watcher import PodWatcher

        find_triton()  # fail now, with the install hint, not on the first pod
        if self.settings.log_dir is not None:
            self._workdir = Path(self.settings.log_dir)
            self._workdir.mkdir(parents=True, exist_ok=True)
        else:
            self._workdir = Path(tempfile.mkdtemp(prefix="gpuserve-runner-"))
            self._own_workdir = True
        self._api = kubeapi.api_client(self.kubeconfig, pool_size=self.settings.workers + 4)
        self._executor = ThreadPoolExecutor(self.settings.workers, thread_name_prefix="runner")
        self._watcher = PodWatcher(
            self._api, LABEL_SELECTOR, self._on_pods, namespaces=self.settings.namespaces
        )
        self._watcher.start()
        self._loop = threading.Thread(target=self._run, name="runner-loop", daemon=True)
        self._loop.start()
        if not self._watcher.synced.wait(sync_timeout):
            self.stop()
            raise RuntimeError(f"could not list pods within {sync_timeout:.0f} s")
        return self

    def stop(self) -> None:
        """Stops every Triton it started (SIGTERM with the pods' drains, in parallel) and
        removes its files. Idempotent."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake.set()
        if self._watcher is not None:
            self._watcher.stop()
        if self._loop is not None:
            self._loop.join(timeout=30.0)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            instances = list(self._instances.values())
        for inst in instances:
            inst.begin_stop()  # a start still running will not launch another server
        # One thread per server: drains run in parallel, not behind queued jobs.
        stoppers = [
            threading.Thread(target=inst.finish_stop, args=(self.settings.start_timeout_s,))
            for inst in instances
        ]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join(timeout=self.settings.start_timeout_s + 120.0)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._sink is not None:
            self._sink.set_targets([])
        if self._api is not None:
            self._api.close()  # type: ignore[no-untyped-call]
        if self._own_workdir and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    # ------------------------------------------------------------------ public views
    def instances(self) -> list[InstanceInfo]:
        """Every pod's local Triton as it is now (stopped ones are dropped). Read live, not
        from the last tick: a pod the tick has just set Ready must not read as starting."""
        with self._lock:
            return [
                inst.info(self._views.get(uid, inst.view)) for uid, inst in self._instances.items()
            ]

    def serving_endpoints(
        self, namespace: str | None = None, service: str | None = None
    ) -> list[str]:
        """gRPC addresses of the pods a Service of role=serving pods routes to now."""
        return serving_endpoints(self.instances(), namespace, service)

    def endpoints_for(self, namespace: str, service: str) -> Callable[[], list[str]]:
        """A callable for ``e2e.loadgen.Target(endpoints=...)``."""
        return lambda: self.serving_endpoints(namespace, service)

    def grpc_address(self, namespace: str, pod: str) -> str | None:
        for info in self.instances():
            if info.namespace == namespace and info.pod == pod:
                return info.grpc
        return None

    def address_of_ip(self, pod_ip: str) -> str | None:
        """The loopback gRPC address behind a pod IP (as listed in Endpoints/EndpointSlices)."""
        for info in self.instances():
            if info.pod_ip == pod_ip and info.state == "ready":
                return info.grpc
        return None

    def set_prometheus(self, sink: TargetSink | None) -> None:
        """Points target updates at another Prometheus (e.g. one restarted on the same port)
        and writes the current targets there at once."""
        with self._lock:
            self._sink = sink
            self._targets = None
        self._wake.set()

    def wait_for(
        self, predicate: Callable[[list[InstanceInfo]], bool], timeout: float, what: str
    ) -> list[InstanceInfo]:
        """Waits (bounded) until ``predicate(instances())`` holds."""
        deadline = time.monotonic() + timeout
        while True:
            infos = self.instances()
            if predicate(infos):
                return infos
            if time.monotonic() >= deadline:
                raise TimeoutError(f"runner: timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.1)

    # ------------------------------------------------------------------ internals
    def _event(self, view: PodView, what: str, detail: str = "") -> None:
        self.events.append(
            RunnerEvent(time.monotonic(), time.time(), view.namespace, view.name, what, detail)
        )
        log.info("%s/%s: %s %s", view.namespace, view.name, what, detail)

    def _on_pods(self, views: dict[str, PodView]) -> None:
        with self._lock:
            self._views = views
        self._wake.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.settings.probe_interval_s)
            self._wake.clear()
            if self._stopping.is_set():
                break
            try:
                self._tick()
            except Exception:  # keep serving; the next tick retries
                log.exception("runner tick failed")

    def _tick(self) -> None:
        now = time.monotonic()
        with self._lock:
            views = dict(self._views)
        self._start_new(views)
        self._stop_gone(views)
        if now - self._last_probe >= self.settings.probe_interval_s:
            self._last_probe = now
            self._probe_and_restart(now)
        self._sync_readiness(views, now)
        self._publish(views)

    def _start_new(self, views: dict[str, PodView]) -> None:
        for uid, view in views.items():
            with self._lock:
                if uid in self._instances or not view.runnable():
                    continue
                workdir = self._path() / view.namespace / f"{view.name}-{uid[:8]}"
                inst = PodInstance(view, workdir)
                self._instances[uid] = inst
            self._event(view, "started", f"node {view.node}")
            self._submit(self._start_job, inst)

    def _stop_gone(self, views: dict[str, PodView]) -> None:
        with self._lock:
            items = list(self._instances.items())
        for uid, inst in items:
            view = views.get(uid)
            if (view is None or view.deleting) and inst.begin_stop():
                self._event(inst.view, "draining", "pod deleted")
                self._submit(self._stop_job, uid, inst)

    def _probe_and_restart(self, now: float) -> None:
        with self._lock:
            items = list(self._instances.items())
        for uid, inst in items:
            if inst.state == "ready":
                healthy = inst.check()
                if not healthy and inst.state == "failed":
                    self._event(inst.view, "failed", inst.error)
                self._healthy[uid] = healthy
            elif inst.state == "failed":
                self._healthy[uid] = False
                backoff = self.settings.restart_backoff_s * (2**inst.restarts)
                if inst.restarts < self.settings.max_restarts and now - inst.failed_at >= backoff:
                    inst.reset_for_restart()
                    self._event(inst.view, "restarting", f"restart {inst.restarts}")
                    self._submit(self._start_job, inst)

    def _sync_readiness(self, views: dict[str, PodView], now: float) -> None:
        """Patches a pod's Ready condition when it differs from what its Triton says."""
        assert self._api is not None
        with self._lock:
            items = list(self._instances.items())
        for uid, inst in items:
            view = views.get(uid)
            if view is None or view.deleting or inst.state in ("stopping", "stopped"):
                continue
            truth = inst.state == "ready" and self._healthy.get(uid, True)
            if truth == view.ready:
                continue
            last = self._last_patch.get(uid)
            if last is not None and last[0] == truth and now - last[1] < PATCH_RETRY_S:
                continue  # sent already; the watch has not shown it yet
            self._last_patch[uid] = (truth, now)
            reason = (
                "TritonReady"
                if truth
                else ("TritonExited" if inst.state == "failed" else "TritonNotReady")
            )
            try:
                kubeapi.set_ready(self._api, view.namespace, view.name, truth, reason)
                self._event(view, "pod-ready" if truth else "pod-not-ready", reason)
            except Exception as err:  # the pod may be going away; retried next tick
                log.info("%s/%s: readiness patch failed: %s", view.namespace, view.name, err)

    def _publish(self, views: dict[str, PodView]) -> None:
        with self._lock:
            infos = [inst.info(views.get(uid, inst.view)) for uid, inst in self._instances.items()]
            targets = scrape_targets(infos)
            sink = self._sink
            changed = targets != self._targets
            if changed:
                self._targets = targets
        if sink is not None and changed:
            try:
                sink.set_targets(targets)
            except Exception as err:  # e.g. Prometheus stopped: rewritten once it is back
                log.info("could not write Prometheus targets: %s", err)
                with self._lock:
                    self._targets = None

    def _path(self) -> Path:
        assert self._workdir is not None
        return self._workdir

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        if self._executor is None or self._stopping.is_set():
            return
        with contextlib.suppress(RuntimeError):  # the executor is shutting down
            self._executor.submit(self._guard, fn, *args)

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("runner job %s failed", getattr(fn, "__name__", fn))
        finally:
            self._wake.set()

    # ------------------------------------------------------------------ jobs
    def _storage_uri(self, view: PodView) -> str:
        assert self._api is not None
        key = (view.namespace, view.service)
        if key not in self._storage_cache:
            self._storage_cache[key] = kubeapi.storage_uri(self._api, *key)
        return self._storage_cache[key]

    def _start_job(self, inst: PodInstance) -> None:
        try:
            self._start(inst)
        finally:
            inst.start_over()  # a stop waiting for this attempt may go on

    def _start(self, inst: PodInstance) -> None:
        assert self._api is not None
        view = inst.view
        if inst.state != "starting":
            return
        try:
            assert view.config_map is not None and view.model_name is not None
            config = kubeapi.read_config_map_key(
                self._api, view.namespace, view.config_map, view.config_key
            )
            repository, changes = write_pod_repository(
                inst.workdir / "repo",
                model_name=view.model_name,
                version=view.model_version,
                config_pbtxt=config,
                storage_uri=self._storage_uri(view),
            )
        except Exception as err:
            inst.fail(f"cannot prepare the model repository: {err}")
            self._event(view, "failed", inst.error)
            return
        inst.changes = changes
        cache = find_triton().binary.parent.parent / "caches"
        flags = translate_args(view.args, cache_directory=cache)
        inst.start(repository, flags, self.settings.start_timeout_s)
        if inst.state == "ready":
            server = inst.server
            self._event(view, "triton-ready", server.grpc_url if server else "")
        elif inst.state == "failed":
            self._event(view, "failed", inst.error)

    def _stop_job(self, uid: str, inst: PodInstance) -> None:
        # Endpoints drop the pod at once (state "stopping"); SIGTERM follows after the delay.
        self._wake.set()
        time.sleep(self.settings.drain_delay_s)
        code = inst.finish_stop(self.settings.start_timeout_s)
        self._event(inst.view, "stopped", f"exit status {code}")
        with self._lock:
            self._instances.pop(uid, None)
            self._healthy.pop(uid, None)
            self._last_patch.pop(uid, None)
        if self.settings.log_dir is None:
            inst.remove_files()
