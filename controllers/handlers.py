"""Importing this module registers every kopf handler of the operator."""

from controllers import (
    acceleratorclass,
    autoscaler,
    indexes,
    inferenceservice,
    kopf_barrier,
    login,
    periodic,
    startup,
)

# Before kopf starts: its start-up barrier would otherwise cost N^2 wake-ups.
kopf_barrier.install()

__all__ = [
    "acceleratorclass",
    "autoscaler",
    "indexes",
    "inferenceservice",
    "login",
    "periodic",
    "startup",
]
