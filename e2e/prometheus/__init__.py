"""A real Prometheus on loopback that scrapes local Triton servers (file_sd targets).

- :class:`PrometheusServer` - start/stop, ``set_targets``, ``query``, ``wait_for``.
- :func:`check_config` - ``promtool check config``.
"""

from e2e.prometheus.promtool import CheckResult, check_config
from e2e.prometheus.server import (
    DEFAULT_JOB,
    PrometheusNotInstalledError,
    PrometheusServer,
    PrometheusStartError,
    build_config,
    find_prometheus,
    prometheus_available,
    targets_document,
)

__all__ = [
    "DEFAULT_JOB",
    "CheckResult",
    "PrometheusNotInstalledError",
    "PrometheusServer",
    "PrometheusStartError",
    "build_config",
    "check_config",
    "find_prometheus",
    "prometheus_available",
    "targets_document",
]
