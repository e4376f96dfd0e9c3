"""The local data plane runner: real tritonservers for the pods of the local cluster.

- :class:`LocalRunner` - watches InferenceService pods labelled
  ``gpuserve.io/readiness=external``, runs a tritonserver per pod on loopback with the pod's
  own config and flags, drives the pod's readiness, keeps Prometheus targets in sync and
  exposes the serving endpoints (``endpoints_for(ns, svc)`` for the load generator).
- :class:`LocalDataPlane` - Prometheus + runner together (a context manager).

CLI: ``python -m e2e.runner --kubeconfig PATH [--namespace NS]``.
"""

from e2e.runner.dataplane import LocalDataPlane
from e2e.runner.flags import LocalFlags, translate_args
from e2e.runner.modelrepo import cpu_config, write_pod_repository
from e2e.runner.podview import PodView, parse_pod
from e2e.runner.runner import LocalRunner, RunnerEvent, RunnerSettings
from e2e.runner.targets import InstanceInfo, scrape_targets, serving_endpoints

__all__ = [
    "InstanceInfo",
    "LocalDataPlane",
    "LocalFlags",
    "LocalRunner",
    "PodView",
    "RunnerEvent",
    "RunnerSettings",
    "cpu_config",
    "parse_pod",
    "scrape_targets",
    "serving_endpoints",
    "translate_args",
    "write_pod_repository",
]
