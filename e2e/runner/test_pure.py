"""Unit tests of the runner's pure parts: pod parsing, flag translation, the CPU config,
targets and endpoints. No cluster, no Triton."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.manifests import example, rendered_on_h100
from e2e.runner import (
    InstanceInfo,
    cpu_config,
    parse_pod,
    scrape_targets,
    serving_endpoints,
    translate_args,
    write_pod_repository,
)

EXTERNAL = {"gpuserve.io/readiness": "external"}


def rendered(extra_labels: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """The operator's Deployment pod template and config.pbtxt for the interactive example."""
    svc_body = example("sleeper-interactive")
    svc_body["metadata"].update(namespace="team-a", uid="u-1")
    children = rendered_on_h100(svc_body, 1, EXTERNAL if extra_labels is None else extra_labels)
    config = next(c for c in children if c["kind"] == "ConfigMap")["data"]["config.pbtxt"]
    template = next(c for c in children if c["kind"] == "Deployment")["spec"]["template"]
    return template, config


def pod_from(template: dict[str, Any], **status: Any) -> dict[str, Any]:
    meta = dict(
        template["metadata"], name="sleeper-chat-h100-abc-xyz", namespace="team-a", uid="pod-uid-1"
    )
    spec = dict(template["spec"], nodeName=status.pop("node", "h100-0"))
    return {"metadata": meta, "spec": spec, "status": status}


RUNNING = {
    "phase": "Running",
    "podIP": "10.244.0.7",
    "conditions": [{"type": "Ready", "status": "False"}],
}


def test_parse_pod_reads_what_the_operator_rendered() -> None:
    template, _ = rendered()
    view = parse_pod(pod_from(template, **RUNNING))
    assert view.service == "sleeper-chat"
    assert view.accelerator_class == "h100"
    assert view.role == "warm" and not view.serving
    assert view.external and not view.ready
    assert view.config_map == "sleeper-chat-triton-config"
    assert view.config_key == "config.pbtxt"
    assert view.model_name == "sleeper" and view.model_version == "1"
    assert "--exit-timeout-secs=30" in view.args
    assert view.runnable()


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"phase": "Pending"}, "not running yet"),
        ({"podIP": None}, "no IP yet"),
        ({"node": None}, "not bound"),
    ],
)
def test_pods_a_kubelet_would_not_start_are_not_runnable(change: dict[str, Any], why: str) -> None:
    template, _ = rendered()
    view = parse_pod(pod_from(template, **{**RUNNING, **change}))
    assert not view.runnable(), why


def test_deleting_or_kwok_driven_pods_are_not_runnable() -> None:
    template, _ = rendered()
    deleting = pod_from(template, **RUNNING)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not parse_pod(deleting).runnable()
    plain, _ = rendered(extra_labels={})
    assert not parse_pod(pod_from(plain, **RUNNING)).runnable()


def test_ready_condition_is_read() -> None:
    template, _ = rendered()
    status = dict(RUNNING, conditions=[{"type": "Ready", "status": "True"}])
    assert parse_pod(pod_from(template, **status)).ready


def test_translate_keeps_behaviour_flags_and_replaces_listeners() -> None:
    template, _ = rendered()
    flags = translate_args(template["spec"]["containers"][0]["args"])
    assert flags.load_models == ("sleeper",)
    assert flags.exit_timeout_s == 30
    assert "--metrics-config=summary_latencies=true" in flags.extra_flags
    assert "--strict-readiness=true" in flags.extra_flags
    joined = " ".join(flags.extra_flags)
    for gone in (
        "--http-port",
        "--grpc-port",
        "--metrics-port",
        "--model-repository",
        "--load-model",
        "--model-control-mode",
        "--disable-auto-complete-config",
    ):
        assert gone not in joined


def test_translate_handles_space_separated_values_and_addresses() -> None:
    flags = translate_args(
        [
            "tritonserver",
            "--http-address",
            "0.0.0.0",
            "--log-verbose",
            "1",
            "--exit-timeout-secs",
            "7",
            "--load-model",
            "a",
            "--load-model=b",
        ]
    )
    assert flags.extra_flags == ("--log-verbose=1",)
    assert flags.exit_timeout_s == 7
    assert flags.load_models == ("a", "b")
    assert "--http-address=0.0.0.0" in flags.dropped


def test_cache_config_gets_the_wheel_cache_directory(tmp_path: Path) -> None:
    flags = translate_args(["--cache-config=local,size=1048576"], cache_directory=tmp_path)
    assert flags.extra_flags == (
        "--cache-config=local,size=1048576",
        f"--cache-directory={tmp_path}",
    )


def test_cpu_config_changes_only_the_instance_kind() -> None:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    _, config = rendered()
    text, changes = cpu_config(config)
    assert changes == ["instance_group # KIND_GPU -> KIND_CPU"]
    before, after = pb.ModelConfig(), pb.ModelConfig()
    text_format.Parse(config, before)
    text_format.Parse(text, after)
    assert after.instance_group[0].kind == pb.ModelInstanceGroup.KIND_CPU
    after.instance_group[0].kind = pb.ModelInstanceGroup.KIND_GPU
    assert after == before  # nothing else moved: batching, parameters, I/O as rendered


def test_repository_layout_uses_the_catalogue_model(tmp_path: Path) -> None:
    _, config = rendered()
    root, _ = write_pod_repository(
        tmp_path / "repo",
        model_name="sleeper",
        version="3",
        config_pbtxt=config,
        storage_uri="demo://sleeper",
    )
    assert (root / "sleeper" / "config.pbtxt").read_text().count("KIND_CPU") == 1
    assert (root / "sleeper" / "3" / "model.py").is_file()
    with pytest.raises(ValueError, match="demo://"):
        write_pod_repository(
            tmp_path / "x",
            model_name="m",
            version="1",
            config_pbtxt=config,
            storage_uri="s3://bucket/m",
        )


def info(pod: str, **kw: Any) -> InstanceInfo:
    base: dict[str, Any] = dict(
        namespace="ns",
        pod=pod,
        service="svc",
        accelerator_class="h100",
        role="serving",
        pod_ip="10.0.0.1",
        state="ready",
        pod_ready=True,
        deleting=False,
        grpc=f"127.0.0.1:{1000 + len(pod)}",
        http="127.0.0.1:1",
        metrics=f"127.0.0.1:{2000 + len(pod)}",
    )
    return InstanceInfo(**{**base, **kw})


def test_serving_endpoints_are_ready_serving_live_pods_of_the_service() -> None:
    infos = [
        info("a"),
        info("bb", role="warm"),
        info("ccc", pod_ready=False),
        info("dddd", deleting=True),
        info("eeeee", state="stopping"),
        info("ffffff", service="other"),
        info("ggggggg", namespace="other-ns"),
    ]
    assert serving_endpoints(infos, "ns", "svc") == ["127.0.0.1:1001"]
    assert len(serving_endpoints(infos)) == 3


def test_scrape_targets_carry_the_pod_labels_and_skip_servers_not_up() -> None:
    targets = scrape_targets(
        [info("a", role="warm"), info("bb", state="starting"), info("ccc", state="stopping")]
    )
    assert [t["labels"]["pod"] for t in targets] == ["a", "ccc"]
    assert targets[0]["labels"] == {
        "namespace": "ns",
        "pod": "a",
        "service": "svc",
        "accelerator_class": "h100",
        "role": "warm",
    }
    assert targets[0]["address"] == "127.0.0.1:2001"
