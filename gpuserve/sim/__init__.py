"""Trace-driven simulation of Triton pods (dynamic batcher, queue policies, start-up, warm
pool, load balancing, Prometheus scraping) scaled by gpuserve's policy or peers' autoscalers.

Entry points: :func:`gpuserve.sim.simulating.simulate`, :class:`gpuserve.sim.config.SimConfig`,
:func:`gpuserve.sim.from_spec.sim_config_from_spec`, :mod:`gpuserve.sim.baselines`.
"""
