"""Importing this module registers every kopf handler of the operator."""

from controllers import (
    acceleratorclass,
    autoscaler,
    indexes,
    inferenceservice,
    kopf_barrier,
    kopf_vanished_kinds,
    login,
    periodic,
    startup,
)

# Before kopf starts: its start-up barrier would otherwise cost N^2 wake-ups.
kopf_barrier.install()
# A watched kind answering 404 (its CRD just deleted) would otherwise end the operator.
kopf_vanished_kinds.install()

__all__ = [
    "acceleratorclass",
    "autoscaler",
    "indexes",
    "inferenceservice",
    "login",
    "periodic",
    "startup",
]
