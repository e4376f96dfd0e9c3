"""What the autoscaler knows about the pods of one service, per AcceleratorClass."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClassPool:
    """Pods of one AcceleratorClass serving (or standing by for) the service.

    starting: ages in seconds of pods created for serving that are not ready yet.
    free_capacity: how many more pods of this class the cluster can place now
        (None = unknown, treated as unbounded).
    cold_start / warm_start: measured seconds from creation (promotion) to ready,
        None when nothing was measured yet (the policy then uses its configured priors).
    """

    name: str
    speed: float = 1.0
    serving_ready: int = 0
    warm_ready: int = 0
    starting: tuple[float, ...] = ()
    free_capacity: int | None = None
    cold_start: float | None = None
    warm_start: float | None = None
    cost_per_hour: float = 1.0

    @property
    def committed(self) -> int:
        """Pods that serve now or will once started."""
        return self.serving_ready + len(self.starting)


@dataclass(frozen=True, slots=True)
class PoolState:
    """All classes the service may use, in the service's order of preference."""

    classes: tuple[ClassPool, ...]

    @property
    def serving_ready(self) -> int:
        return sum(c.serving_ready for c in self.classes)

    @property
    def most_serving(self) -> str | None:
        """The class with the most ready serving pods (the first on a tie); None without."""
        busiest = max(self.classes, key=lambda c: c.serving_ready, default=None)
        return busiest.name if busiest is not None and busiest.serving_ready > 0 else None

    @property
    def committed(self) -> int:
        return sum(c.committed for c in self.classes)

    @property
    def warm_ready(self) -> int:
        return sum(c.warm_ready for c in self.classes)

    @property
    def starting(self) -> int:
        return sum(len(c.starting) for c in self.classes)

    def by_name(self, name: str) -> ClassPool:
        for pool in self.classes:
            if pool.name == name:
                return pool
        raise KeyError(name)
