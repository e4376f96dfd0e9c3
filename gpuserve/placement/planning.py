"""Spread a service's replicas over its AcceleratorClasses in order of preference.

Pure: the controller reads node capacity and allocations from the API and passes them
in; the real scheduler makes the final binding. Pods already running stay where they
are (moving them costs a cold start); growth goes to the first class with free capacity;
shrinking removes pods from the least preferred classes first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuserve.api.llm_sizing import memory_shortfall, precisions_needed
from gpuserve.api.models import AcceleratorClassSpec, InferenceServiceSpec


@dataclass(frozen=True)
class ClassCapacity:
    """What one class has now, in GPUs (or slices) of its resource."""

    free: int
    total: int
    # On top of ``free``: what a serving pod gets by preempting other services' standby pods.
    preemptible: int = 0


@dataclass(frozen=True)
class PoolNow:
    """Pods of one pool: scheduled (bound to a node) and pending (not yet bound)."""

    scheduled: int = 0
    pending: int = 0


@dataclass(frozen=True)
class Placement:
    replicas: dict[str, int]
    surge: dict[str, bool]
    unplaced: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.replicas.values())


@dataclass(frozen=True)
class PoolsPlan:
    """Replicas of each class's two Deployments: serving priority and warm-pool standby."""

    serving: dict[str, int]
    standby: dict[str, int]
    surge: dict[str, bool]
    standby_surge: dict[str, bool]
    unplaced: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ClassIssue:
    class_name: str
    reason: str
    message: str


def usable_classes(
    spec: InferenceServiceSpec, classes: Mapping[str, AcceleratorClassSpec]
) -> tuple[list[str], list[ClassIssue]]:
    """Allowed classes that exist and can run this spec, in preference order.

    A class is skipped when it is missing, serves MIG slices to a multi-GPU pod, cannot
    run a numeric type the spec needs (compute capability), or, for an LLM, has GPUs (or
    slices) too small for the weights and one full-context sequence of KV cache; a class
    that states no memoryGiB is not checked for memory."""
    usable: list[str] = []
    issues: list[ClassIssue] = []
    for name in spec.accelerators.classes:
        accel = classes.get(name)
        if accel is None:
            issues.append(
                ClassIssue(name, "AcceleratorClassNotFound", f"AcceleratorClass {name!r} not found")
            )
        elif accel.mig is not None and spec.accelerators.gpus_per_pod != 1:
            issues.append(
                ClassIssue(
                    name,
                    "MigNeedsOneSlice",
                    f"AcceleratorClass {name!r} serves MIG slices: accelerators.gpusPerPod "
                    "must be 1 (Triton sees one MIG device per process)",
                )
            )
        elif unsupported := [what for what, p in precisions_needed(spec) if not accel.supports(p)]:
            issues.append(
                ClassIssue(
                    name,
                    "PrecisionUnsupported",
                    f"{' and '.join(unsupported)} need{'s' if len(unsupported) == 1 else ''} "
                    f"a newer GPU than AcceleratorClass "
                    f"{name!r} (compute capability {accel.compute_capability})",
                )
            )
        elif accel.memory_gib is not None and (
            shortfall := memory_shortfall(spec, accel.memory_gib)
        ):
            issues.append(
                ClassIssue(
                    name,
                    "InsufficientGPUMemory",
                    f"AcceleratorClass {name!r} is too small: the model {shortfall}",
                )
            )
        else:
            usable.append(name)
    return usable, issues


def place(
    *,
    desired: int,
    order: Sequence[str],
    now: Mapping[str, PoolNow],
    capacity: Mapping[str, ClassCapacity],
    gpus_per_pod: int = 1,
) -> Placement:
    """Per-class replica counts that add up to ``desired`` (when capacity allows)."""
    if not order:
        return Placement(replicas={}, surge={}, unplaced=desired, problems=["no usable class"])
    free = {c: capacity.get(c, ClassCapacity(0, 0)).free // gpus_per_pod for c in order}
    replicas = {c: now.get(c, PoolNow()).scheduled for c in order}
    # Pending pods keep their place only where capacity is left for them; otherwise they
    # are re-placed below (the class is full and placement moves on).
    for c in order:
        pending = now.get(c, PoolNow()).pending
        keep = min(pending, free[c])
        replicas[c] += keep
        free[c] -= keep
    excess = sum(replicas.values()) - desired
    for c in reversed(order):  # shrink from the least preferred class
        if excess <= 0:
            break
        cut = min(excess, replicas[c])
        replicas[c] -= cut
        free[c] += cut
        excess -= cut
    missing = desired - sum(replicas.values())
    for c in order:  # grow into the most preferred class with room
        if missing <= 0:
            break
        add = min(missing, free[c])
        replicas[c] += add
        free[c] -= add
        missing -= add
    problems: list[str] = []
    if missing > 0:
        full = ", ".join(order)
        problems.append(
            f"{missing} replica(s) unplaced: no free capacity in AcceleratorClass(es) {full}"
        )
    surge = {c: free[c] > 0 for c in order}
    return Placement(replicas=replicas, surge=surge, unplaced=max(missing, 0), problems=problems)


def plan_pools(
    *,
    desired: int,
    warm_pool: int,
    order: Sequence[str],
    serving_now: Mapping[str, PoolNow],
    standby_now: Mapping[str, PoolNow],
    standby_serving: Mapping[str, int],
    capacity: Mapping[str, ClassCapacity],
    gpus_per_pod: int = 1,
) -> PoolsPlan:
    """Sizes of the serving and the standby Deployment of every class.

    Serving-priority pods are placed first (``desired`` of them), on free GPUs plus what
    other services' standby pods hold, since the scheduler preempts those for them. The
    standby pool gets ``warm_pool`` plus the standby pods serving right now (promoted at
    once, waiting for a serving-priority pod to take their place), on what is really left:
    a standby pod preempts nothing. A shortfall is charged to the warm pool first.
    """
    Room = Mapping[str, ClassCapacity]

    def placed(want: int, now: Mapping[str, PoolNow], room: Room) -> Placement:
        return place(desired=want, order=order, now=now, capacity=room, gpus_per_pod=gpus_per_pod)

    serving_cap = {
        c: ClassCapacity(free=cap.free + cap.preemptible, total=cap.total)
        for c, cap in capacity.items()
    }
    serving = placed(desired, serving_now, serving_cap)
    left: dict[str, ClassCapacity] = {}
    for c in order:
        cap = capacity.get(c, ClassCapacity(0, 0))
        # What the serving plan adds on this class (pending kept, growth) comes out of the
        # free GPUs; what it gives up (shrinking) goes back to them.
        taken = (serving.replicas[c] - serving_now.get(c, PoolNow()).scheduled) * gpus_per_pod
        left[c] = ClassCapacity(free=max(cap.free - taken, 0), total=cap.total)
    promoted = sum(max(n, 0) for n in standby_serving.values())
    standby = placed(max(warm_pool, 0) + promoted, standby_now, left)
    # A standby pod that serves keeps its place until a serving-priority pod relieves it.
    standby_replicas = {c: max(standby.replicas[c], standby_serving.get(c, 0)) for c in order}
    problems = list(serving.problems)
    if standby.unplaced:
        problems.append(
            f"warm pool short by {standby.unplaced}: no free capacity in AcceleratorClass(es) "
            + ", ".join(order)
        )
    return PoolsPlan(
        serving=serving.replicas,
        standby=standby_replicas,
        surge=serving.surge,
        standby_surge=standby.surge,
        unplaced=serving.unplaced + standby.unplaced,
        problems=problems,
    )
