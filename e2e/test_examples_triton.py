"""Every example's rendered config.pbtxt is loaded by a real tritonserver.

The pytriton wheel ships Triton with the Python backend only and no GPU, so configs are
loaded with KIND_GPU turned into KIND_CPU, and non-Python configs on the Python backend
(`emulate_backend`): Triton itself still checks the batching, priority, queue-policy,
I/O and naming rules; what the emulation changed is asserted to be only backend, device
and optimization fields.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.rendering import load_documents, split_manifests
from e2e.triton.validate import validate_model_config
from gpuserve.api.models import InferenceService
from gpuserve.triton.modelconfig import parse_config_pbtxt, render_config_pbtxt

pytestmark = pytest.mark.triton
REPO = Path(__file__).resolve().parents[1]
SERVICES, _ = split_manifests(load_documents([REPO / "examples"]))


@pytest.mark.parametrize("svc", SERVICES, ids=lambda s: s.metadata.name)
def test_example_config_loads_in_real_triton(svc: InferenceService) -> None:
    if svc.spec.is_llm:
        # The local Triton has neither LLM backend, and the Python-backend emulation would
        # check only its own I/O against the sleeper model: the vllm and tensorrtllm
        # configs are parsed as ModelConfig in tests/test_llm_rendering.py instead.
        pytest.skip(f"{svc.spec.model.format} backend is not in the local Triton")
    text = render_config_pbtxt(svc.spec)
    parse_config_pbtxt(text)  # the proto accepts it as text format
    result = validate_model_config(text, emulate_backend=True)
    assert result.ok, result.message
    allowed = ("platform", "backend", "instance_group", "optimization")
    for change in result.emulated:
        assert change.startswith(allowed), change


def test_triton_rejects_what_admission_would_let_through_unchecked() -> None:
    # The same validator catches a config that bypassed the API (e.g. a bad extra edit).
    svc = next(s for s in SERVICES if s.metadata.name == "sleeper-chat")
    text = render_config_pbtxt(svc.spec).replace("max_batch_size: 32", "max_batch_size: 4")
    result = validate_model_config(text, emulate_backend=True)
    assert not result.ok and "preferred" in result.message
