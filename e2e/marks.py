"""pytest marks the end-to-end modules share."""

from __future__ import annotations

import pytest

from e2e.prometheus import prometheus_available
from e2e.triton import triton_available

# A test on the local cluster with a real tritonserver per pod and a real Prometheus;
# skipped, with the reason, where the wheel or the binary is missing.
LOCAL_DATA_PLANE = [
    pytest.mark.cluster,
    pytest.mark.triton,
    pytest.mark.prometheus,
    pytest.mark.skipif(not triton_available(), reason="tritonserver wheel not installed"),
    pytest.mark.skipif(not prometheus_available(), reason="prometheus not installed"),
]
