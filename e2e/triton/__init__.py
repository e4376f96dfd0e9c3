"""The real Triton Inference Server (from the nvidia-pytriton wheel) on CPU and loopback.

- :class:`TritonServer` - start/stop a tritonserver on a model repository.
- :func:`validate_model_config` - check a config.pbtxt against real Triton
  (:class:`ConfigValidator` checks many on one server).
- :func:`write_model` - lay out ``<repo>/<name>/config.pbtxt`` + ``1/model.py``.
- :func:`find_triton` / :func:`triton_available` - locate and prepare the wheel's binary.
"""

from e2e.triton.install import (
    TritonInstall,
    TritonNotInstalledError,
    cache_dir,
    find_triton,
    triton_available,
)
from e2e.triton.logs import error_lines
from e2e.triton.repository import write_model
from e2e.triton.server import TritonModelError, TritonServer, TritonStartError
from e2e.triton.validate import (
    ConfigValidator,
    ValidationResult,
    emulate_on_python_backend,
    validate_model_config,
)

__all__ = [
    "ConfigValidator",
    "TritonInstall",
    "TritonModelError",
    "TritonNotInstalledError",
    "TritonServer",
    "TritonStartError",
    "ValidationResult",
    "cache_dir",
    "emulate_on_python_backend",
    "error_lines",
    "find_triton",
    "triton_available",
    "validate_model_config",
    "write_model",
]
