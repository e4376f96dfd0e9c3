"""The local runner's pod repository for an LLM service: the rendered vLLM config is served
by the catalogue's LLM emulator, whose tensors it declares (the config leaves them to vLLM)."""

from __future__ import annotations

from pathlib import Path

import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from e2e.models import resolve_demo_uri
from e2e.runner.modelrepo import write_pod_repository
from gpuserve.api.models import InferenceServiceSpec
from gpuserve.triton.modelconfig import render_model_files

REPO_ROOT = Path(__file__).resolve().parents[2]
EMULATOR = "demo://llm_emulator"


def _rendered_vllm_config() -> str:
    spec = yaml.safe_load((REPO_ROOT / "examples" / "llama-vllm.yaml").read_text())["spec"]
    return render_model_files(InferenceServiceSpec.model_validate(spec))["config.pbtxt"]


def test_vllm_config_gets_the_emulators_tensors(tmp_path: Path) -> None:
    rendered = _rendered_vllm_config()
    before = pb.ModelConfig()
    text_format.Parse(rendered, before)
    assert not before.input  # left to the backend: without a stand-in nothing declares them
    root, changes = write_pod_repository(
        tmp_path,
        model_name=before.name,
        version="1",
        config_pbtxt=rendered,
        storage_uri=EMULATOR,
    )
    after = pb.ModelConfig()
    text_format.Parse((root / before.name / "config.pbtxt").read_text(), after)
    entry = resolve_demo_uri(EMULATOR)
    assert after.backend == "python"
    assert [i.name for i in after.input] == [i.name for i in entry.inputs]
    assert [o.name for o in after.output] == [o.name for o in entry.outputs]
    assert any(EMULATOR in change for change in changes)
    # What the operator rendered for the engine stays: decoupled, custom metrics on.
    assert after.model_transaction_policy.decoupled
    assert after.parameters["REPORT_CUSTOM_METRICS"].string_value == "true"
    assert (root / before.name / "1" / "model.py").is_file()
