"""warmPoolMode auto end to end in the pure layers: the size the policy decides is the size
the service plan gives the standby Deployments."""

from __future__ import annotations

from e2e.invalid_cases import valid_service
from gpuserve.api.models import AcceleratorClassSpec, InferenceServiceSpec
from gpuserve.placement.capacity import PRODUCT_LABEL, NodeInfo
from gpuserve.placement.roles import PodState
from gpuserve.placement.service_plan import ClusterView, plan_service

H100 = "NVIDIA-H100-80GB-HBM3"
CLASSES = {"h100": AcceleratorClassSpec.model_validate({"gpuProduct": H100})}
NODE = NodeInfo(name="n0", labels={PRODUCT_LABEL: H100}, allocatable={"nvidia.com/gpu": 8})


def test_the_plan_sizes_standby_pods_from_the_decision_when_given_else_from_the_spec() -> None:
    body = valid_service("chat")
    body["spec"]["accelerators"] = {"classes": ["h100"]}
    body["spec"]["scaling"] = {"maxReplicas": 6, "warmPool": 1, "warmPoolMode": "auto"}
    spec = InferenceServiceSpec.model_validate(body["spec"])
    serving = PodState(
        name="chat-0", accelerator_class="h100", role="serving", ready=True, node="n0"
    )
    cluster = ClusterView(classes=CLASSES, nodes=[NODE], gpu_pods=[], pods=[serving])
    decided = plan_service(spec, owner="ns/chat", cluster=cluster, desired=1, warm_pool=3)
    assert decided.pools is not None and decided.pools.standby == {"h100": 3}
    fixed = plan_service(spec, owner="ns/chat", cluster=cluster, desired=1)
    assert fixed.pools is not None and fixed.pools.standby == {"h100": 1}
