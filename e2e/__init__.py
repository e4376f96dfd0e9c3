"""End-to-end harnesses and tests for gpuserve (local control plane, Triton, load, Prometheus)."""
