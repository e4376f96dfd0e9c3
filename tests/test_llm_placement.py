"""Classes an LLM service cannot use: GPU generation (fp8 KV cache or weights) and memory."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from e2e.invalid_cases import valid_llm_service
from gpuserve.api.llm_sizing import memory_need, min_kv_cache_bytes, weight_bytes
from gpuserve.api.models import AcceleratorClassSpec, InferenceServiceSpec
from gpuserve.placement.planning import usable_classes

GIB = 1 << 30


def _accel(capability: str, memory: int | None, **extra: Any) -> AcceleratorClassSpec:
    body: dict[str, Any] = {"gpuProduct": "GPU", "computeCapability": capability, **extra}
    if memory is not None:
        body["memoryGiB"] = memory
    return AcceleratorClassSpec.model_validate(body)


H100 = _accel("9.0", 80)
L4 = _accel("8.9", 24)
A100_40 = _accel("8.0", 40, mig={"profile": "3g.40gb"})
A100_10 = _accel("8.0", 10, mig={"profile": "1g.10gb"})
CLASSES = {"h100": H100, "l4": L4, "a100-40": A100_40, "a100-10": A100_10}


def _spec(fmt: str = "vllm", classes: list[str] | None = None, **llm: Any) -> InferenceServiceSpec:
    body = copy.deepcopy(valid_llm_service(model_format=fmt)["spec"])
    body["accelerators"]["classes"] = classes or list(CLASSES)
    body["llm"].update(llm)
    return InferenceServiceSpec.model_validate(body)


def _reasons(spec: InferenceServiceSpec) -> dict[str, str]:
    usable, issues = usable_classes(spec, CLASSES)
    return {name: "usable" for name in usable} | {i.class_name: i.reason for i in issues}


@pytest.mark.parametrize(
    ("llm", "skipped"),
    [
        ({"kvCacheDtype": "fp8"}, "llm.kvCacheDtype fp8"),
        ({"quantization": "fp8"}, "llm.quantization fp8"),
    ],
)
def test_fp8_kv_cache_or_weights_skip_gpus_below_8_9(llm: dict[str, Any], skipped: str) -> None:
    spec = _spec(**llm)
    usable, issues = usable_classes(spec, CLASSES)
    assert usable == ["h100", "l4"]
    assert {i.class_name for i in issues} == {"a100-40", "a100-10"}
    for issue in issues:
        assert issue.reason == "PrecisionUnsupported"
        assert skipped in issue.message and "compute capability 8.0" in issue.message


def test_a_16_bit_llm_runs_on_ampere_when_it_fits() -> None:
    assert _reasons(_spec()) == {
        "h100": "usable",
        "l4": "usable",
        "a100-40": "usable",
        "a100-10": "InsufficientGPUMemory",
    }


def test_memory_message_names_the_sizes() -> None:
    spec = _spec(kvCacheBytesPerToken=131072, classes=["a100-10"])
    (issue,) = usable_classes(spec, CLASSES)[1]
    # 8e9 bf16 weights = 14.9 GiB; 8192 tokens x 128 KiB = 1.0 GiB; 0.9 x 10 GiB = 9.0 GiB.
    for part in ("14.9 GiB of weights", "1.0 GiB of KV cache", "8192-token", "9.0 GiB", "10 GiB"):
        assert part in issue.message, issue.message
    assert "'a100-10'" in issue.message


def test_int4_weights_fit_a_slice_that_16_bit_weights_do_not() -> None:
    assert _reasons(_spec(classes=["a100-10"]))["a100-10"] == "InsufficientGPUMemory"
    assert _reasons(_spec(classes=["a100-10"], quantization="int4-awq"))["a100-10"] == "usable"


def test_the_kv_cache_of_one_sequence_can_tip_the_balance() -> None:
    # 3.7 GiB of weights fit 9 GiB alone; with 32768 tokens x 192 KiB (6 GiB) they do not.
    small: dict[str, Any] = {"parameters": "2B", "classes": ["a100-10"]}
    assert _reasons(_spec(**small))["a100-10"] == "usable"
    long = _spec(maxContextLength=32768, kvCacheBytesPerToken=196608, **small)
    assert long.llm is not None and min_kv_cache_bytes(long, long.llm) == 6 * GIB
    assert _reasons(long)["a100-10"] == "InsufficientGPUMemory"
    # An fp8 cache is half the 16-bit size the bytes per token are given at.
    fp8 = _spec(maxContextLength=32768, kvCacheBytesPerToken=196608, kvCacheDtype="fp8", **small)
    assert fp8.llm is not None and min_kv_cache_bytes(fp8, fp8.llm) == 3 * GIB


def test_tensor_parallelism_splits_the_weights() -> None:
    body = copy.deepcopy(valid_llm_service()["spec"])
    body["llm"].update(parameters="70B", tensorParallelSize=2)
    body["accelerators"].update(classes=["h100"], gpusPerPod=2)
    spec = InferenceServiceSpec.model_validate(body)
    need = memory_need(spec, spec.llm, 80)  # type: ignore[arg-type]
    assert need.weights_gib == pytest.approx(70e9 * 2 / 2 / GIB)
    assert need.fits  # 65 GiB per GPU of 72
    body["llm"]["tensorParallelSize"] = body["accelerators"]["gpusPerPod"] = 1
    one = InferenceServiceSpec.model_validate(body)
    assert not memory_need(one, one.llm, 80).fits  # type: ignore[arg-type]


def test_tensorrtllm_fraction_is_of_the_memory_left_after_the_weights() -> None:
    spec = _spec("tensorrtllm", kvCacheMemoryFraction=0.5, parameters="4B")
    need = memory_need(spec, spec.llm, 10)  # type: ignore[arg-type]
    weights = 4e9 * 2 / GIB
    assert need.budget_gib == pytest.approx(weights + (10 - weights) * 0.5)
    # vLLM's fraction is of the whole GPU: 0.5 x 10 GiB cannot hold 7.5 GiB of weights.
    vllm = _spec("vllm", kvCacheMemoryFraction=0.5, parameters="4B")
    assert not memory_need(vllm, vllm.llm, 10).fits  # type: ignore[arg-type]
    assert need.fits


def test_weight_bytes_given_directly_and_classes_without_memory_are_not_checked() -> None:
    spec = _spec(parameters=None, weightBytes="60Gi")
    assert weight_bytes(spec, spec.llm) == 60 * GIB  # type: ignore[arg-type]
    no_memory = {"gpu": _accel("9.0", None)}
    body = spec.model_copy(
        update={"accelerators": spec.accelerators.model_copy(update={"classes": ["gpu"]})}
    )
    assert usable_classes(body, no_memory) == (["gpu"], [])
    assert _reasons(spec)["l4"] == "InsufficientGPUMemory"
