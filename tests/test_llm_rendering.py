"""LLM services rendered: config.pbtxt as Triton's ModelConfig, vLLM's model.json, the pod."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from cli.rendering import load_documents, render_service, split_manifests
from e2e.invalid_cases import valid_llm_service, valid_service
from gpuserve.api.models import DEFAULT_TRITON_IMAGES, parse_inference_service
from gpuserve.resources.rendering import config_hash, model_files

REPO = Path(__file__).resolve().parents[1]
CLASSES = REPO / "examples" / "accelerator-classes.yaml"


def _render(example: str) -> dict[str, dict[str, Any]]:
    services, classes = split_manifests(load_documents([REPO / "examples" / example, CLASSES]))
    (svc,) = services
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in render_service(svc, classes)}


def _config(objs: dict[str, dict[str, Any]]) -> tuple[pb.ModelConfig, dict[str, str]]:
    (cm,) = [o for o in objs.values() if o["kind"] == "ConfigMap"]
    cfg = pb.ModelConfig()
    text_format.Parse(cm["data"]["config.pbtxt"], cfg)
    return cfg, cm["data"]


def _pod(objs: dict[str, dict[str, Any]], deployment: str) -> dict[str, Any]:
    pod: dict[str, Any] = objs[f"Deployment/{deployment}"]["spec"]["template"]["spec"]
    return pod


def test_vllm_example_config_model_json_and_pod() -> None:
    objs = _render("llama-vllm.yaml")
    cfg, data = _config(objs)
    assert cfg.backend == "vllm" and cfg.platform == ""
    assert cfg.model_transaction_policy.decoupled
    assert cfg.max_batch_size == 0 and not cfg.HasField("dynamic_batching")
    assert [g.kind for g in cfg.instance_group] == [pb.ModelInstanceGroup.KIND_MODEL]
    assert cfg.parameters["REPORT_CUSTOM_METRICS"].string_value == "true"
    engine = json.loads(data["model.json"])
    assert engine == {
        "model": "/weights",
        "dtype": "bfloat16",
        "max_model_len": 8192,
        "max_num_seqs": 128,
        "gpu_memory_utilization": 0.9,
        "enable_prefix_caching": True,
        "kv_cache_dtype": "auto",
        "tensor_parallel_size": 1,
        # The backend reports vLLM's metrics only while vLLM keeps its stats.
        "disable_log_stats": False,
        # Prefill chunks whose step fits the 60 ms TPOT objective on the H100, the first
        # class (gpuserve.llm.chunking; tests/llm/test_chunking.py).
        "max_num_batched_tokens": 1024,
        "enable_chunked_prefill": True,
    }
    pod = _pod(objs, "llama-chat-h100")
    (triton,) = pod["containers"]
    assert triton["image"] == DEFAULT_TRITON_IMAGES["vllm"]
    mounts = {m["mountPath"]: m for m in triton["volumeMounts"]}
    # The ConfigMap is the model directory; model.json lands in the version directory.
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "subPath" not in mounts["/models/llama"]
    assert {"key": "model.json", "path": "1/model.json"} in volumes["model-config"]["configMap"][
        "items"
    ]
    assert mounts["/weights"]["subPath"] == "llama-3.1-8b-instruct"
    assert volumes["model-files"]["persistentVolumeClaim"]["claimName"] == "model-store"
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory"} and "/dev/shm" in mounts


def test_tensorrtllm_example_parameters() -> None:
    objs = _render("llama-trtllm.yaml")
    cfg, data = _config(objs)
    assert "model.json" not in data
    assert cfg.backend == "tensorrtllm" and cfg.model_transaction_policy.decoupled
    assert cfg.max_batch_size == 256
    # A dynamic batcher with no window: requests go straight to the in-flight batcher.
    assert cfg.HasField("dynamic_batching")
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 0
    assert not cfg.dynamic_batching.preferred_batch_size
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert params["gpt_model_type"] == "inflight_fused_batching"
    assert params["kv_cache_free_gpu_mem_fraction"] == "0.85"
    assert params["enable_kv_cache_reuse"] == "true"
    assert params["gpt_model_path"] == "/models/llama-trtllm/1"
    names = [t.name for t in cfg.input]
    assert names[:3] == ["input_ids", "input_lengths", "request_output_len"]
    assert [t.name for t in cfg.output] == ["output_ids", "sequence_length"]
    (triton,) = _pod(objs, "llama-trtllm-h100")["containers"]
    assert triton["image"] == DEFAULT_TRITON_IMAGES["tensorrtllm"]
    # The engine sits in the version directory, filled from object storage.
    assert {"mountPath": "/models/llama-trtllm/1", "name": "model-files", "readOnly": True} in (
        triton["volumeMounts"]
    )


def _llm(fmt: str = "vllm", **llm: Any) -> dict[str, Any]:
    body = valid_llm_service(model_format=fmt)
    body["metadata"]["namespace"] = "ml"
    body["spec"]["llm"].update(llm)
    return body


def _files(body: dict[str, Any]) -> tuple[pb.ModelConfig, dict[str, Any] | None]:
    services, _ = split_manifests([("test", body)])
    objs = render_service(services[0], {"h100": _h100()})
    cfg, data = _config({f"{o['kind']}/{o['metadata']['name']}": o for o in objs})
    return cfg, json.loads(data["model.json"]) if "model.json" in data else None


def _h100() -> Any:
    _, classes = split_manifests(load_documents([CLASSES]))
    return classes["h100"]


@pytest.mark.parametrize(
    ("llm", "expected"),
    [
        (
            {"quantization": "fp8", "kvCacheDtype": "fp8"},
            {"quantization": "fp8", "kv_cache_dtype": "fp8"},
        ),
        # AWQ/GPTQ checkpoints name their method; vLLM then picks its fast kernels itself.
        ({"quantization": "int4-awq"}, {"kv_cache_dtype": "auto"}),
        ({"kvCacheDtype": "bf16", "prefixCaching": False}, {"enable_prefix_caching": False}),
    ],
)
def test_vllm_engine_arguments_follow_the_typed_fields(
    llm: dict[str, Any], expected: dict[str, Any]
) -> None:
    _, engine = _files(_llm(**llm))
    assert engine is not None
    assert {k: engine.get(k) for k in expected} == expected
    if llm.get("quantization") != "fp8":
        assert "quantization" not in engine


def test_tensor_parallel_vllm_spans_the_pod_gpus() -> None:
    body = _llm(tensorParallelSize=2)
    body["spec"]["accelerators"]["gpusPerPod"] = 2
    cfg, engine = _files(body)
    assert engine is not None and engine["tensor_parallel_size"] == 2
    assert cfg.instance_group[0].kind == pb.ModelInstanceGroup.KIND_MODEL


def test_prefix_caching_off_turns_kv_reuse_off_for_tensorrtllm() -> None:
    cfg, engine = _files(_llm("tensorrtllm", prefixCaching=False))
    assert engine is None
    assert cfg.parameters["enable_kv_cache_reuse"].string_value == "false"


def test_the_image_is_the_services_or_its_backends_default() -> None:
    own = _llm()
    own["spec"]["triton"] = {"image": "registry.local/triton:vllm-custom"}
    for body, image in (
        (own, "registry.local/triton:vllm-custom"),
        (_llm(), DEFAULT_TRITON_IMAGES["vllm"]),
        (_llm("tensorrtllm"), DEFAULT_TRITON_IMAGES["tensorrtllm"]),
        (
            {**valid_service(), "metadata": {"name": "svc", "namespace": "ml"}},
            DEFAULT_TRITON_IMAGES["standard"],
        ),
    ):
        services, _ = split_manifests([("test", body)])
        deployments = [
            o for o in render_service(services[0], {"h100": _h100()}) if o["kind"] == "Deployment"
        ]
        assert {d["spec"]["template"]["spec"]["containers"][0]["image"] for d in deployments} == {
            image
        }


def test_a_model_json_change_rolls_the_pods() -> None:
    a = parse_inference_service(_llm()).spec
    b = parse_inference_service(_llm(maxRunningSequences=64)).spec
    classes = {"h100": _h100()}
    assert config_hash(a, classes) != config_hash(b, classes)


def _with_objective(tpot: str | None, **llm: Any) -> dict[str, Any]:
    body = _llm(**llm)
    if tpot is None:
        body["spec"]["slo"].pop("tpot", None)
    else:
        body["spec"]["slo"]["tpot"] = tpot
    return body


def test_the_prefill_chunk_budget_follows_the_tpot_objective_or_the_spec() -> None:
    budgets = {}
    for tpot in ("50ms", "100ms"):
        _, engine = _files(_with_objective(tpot))
        assert engine is not None
        budgets[tpot] = engine["max_num_batched_tokens"]
    # A looser objective lets a step carry more prompt tokens.
    assert budgets["50ms"] < budgets["100ms"] <= 8192
    # No TPOT objective: vLLM's own default stands.
    _, engine = _files(_with_objective(None))
    assert engine is not None and "max_num_batched_tokens" not in engine
    assert "enable_chunked_prefill" not in engine
    # The spec's value is the engine's, objective or not.
    _, engine = _files(_with_objective("50ms", maxBatchedTokens=4096))
    assert engine is not None and engine["max_num_batched_tokens"] == 4096


def test_the_chunk_budget_follows_the_preferred_class_and_rolls_the_pods_with_it() -> None:
    _, classes = split_manifests(load_documents([CLASSES]))
    body = _with_objective("100ms")
    body["spec"]["accelerators"]["classes"] = ["h100", "a100-3g40gb"]
    spec = parse_inference_service(body).spec
    # Both classes usable, or the H100s gone from the cluster.
    h100_first = {"h100": classes["h100"], "a100-3g40gb": classes["a100-3g40gb"]}
    only_slice = {"a100-3g40gb": classes["a100-3g40gb"]}
    files = model_files(spec, h100_first)
    sliced = model_files(spec, only_slice)
    # A third of an A100 prefills ~7x slower than an H100: smaller chunks fit the objective.
    h100_chunk = json.loads(files["model.json"])["max_num_batched_tokens"]
    slice_chunk = json.loads(sliced["model.json"])["max_num_batched_tokens"]
    assert slice_chunk < h100_chunk
    assert config_hash(spec, h100_first) != config_hash(spec, only_slice)


def test_the_llm_section_does_not_change_the_user_spec() -> None:
    body = _llm()
    before = copy.deepcopy(body)
    _files(body)
    assert body == before
