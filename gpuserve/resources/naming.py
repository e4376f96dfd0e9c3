"""Names and labels shared by every child object."""

from __future__ import annotations

import hashlib

from gpuserve.api.models import CLASSES_PLURAL as CLASSES_PLURAL
from gpuserve.api.models import GROUP
from gpuserve.api.models import SERVICES_PLURAL as SERVICES_PLURAL

LABEL_SERVICE = f"{GROUP}/service"
LABEL_CLASS = f"{GROUP}/accelerator-class"
LABEL_ROLE = f"{GROUP}/role"
ROLE_SERVING = "serving"
ROLE_WARM = "warm"
# A serving pod the Service routes around while it clears a queue it cannot clear within
# the budget (gpuserve.autoscaling.shedding): it counts as serving, and no selector of a
# Service or InferencePool matches it until it rejoins.
ROLE_ROUTED_AROUND = "routed-around"


def serves(role: str) -> bool:
    """Whether a pod of this role is one of the service's serving pods (in routing or not)."""
    return role in (ROLE_SERVING, ROLE_ROUTED_AROUND)

# Pods of a class's standby Deployment carry this label (serving-priority pods carry none,
# so the serving Deployment's selector, which is immutable, stays what it always was).
LABEL_POOL = f"{GROUP}/pool"
POOL_STANDBY = "standby"
# The warm pool's PriorityClass: below both tiers, so any serving pod can preempt it.
STANDBY_PRIORITY_CLASS = "gpuserve-standby"
ANNOTATION_CONFIG_HASH = f"{GROUP}/config-hash"
# When a pod last stopped serving (epoch seconds): it drains before its Deployment shrinks.
ANNOTATION_DEMOTED_AT = f"{GROUP}/demoted-at"
FIELD_MANAGER = "gpuserve-operator"

# Deployment names end up in pod names with two generated suffixes; keep room for them.
_MAX_NAME = 52


def child_name(*parts: str) -> str:
    """Join parts into a DNS label, shortened with a stable hash when too long."""
    name = "-".join(parts)
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - 9].rstrip('-')}-{digest}"


def common_labels(service: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "triton",
        "app.kubernetes.io/instance": service,
        "app.kubernetes.io/component": "predictor",
        "app.kubernetes.io/managed-by": "gpuserve",
        "app.kubernetes.io/part-of": "gpuserve",
        LABEL_SERVICE: service,
    }


def serving_pod_labels(service: str) -> dict[str, str]:
    """What selects the pods that serve traffic (the Service's and InferencePool's
    selector): warm standby pods carry another role until they are promoted."""
    return {LABEL_SERVICE: service, LABEL_ROLE: ROLE_SERVING}


def config_map_name(service: str) -> str:
    return child_name(service, "triton-config")


def deployment_name(service: str, accelerator_class: str) -> str:
    return child_name(service, accelerator_class)


def standby_deployment_name(service: str, accelerator_class: str) -> str:
    return child_name(service, accelerator_class, POOL_STANDBY)


def priority_class_name(tier: str) -> str:
    return f"gpuserve-{tier}"


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]
