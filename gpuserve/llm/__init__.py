"""The LLM engine model: continuous batching, a paged KV cache and a prefix cache.

One pure, clock-free implementation shared by the local streaming emulator (a Triton
Python-backend model that sleeps each step's cost) and the token-level simulator (which
advances a virtual clock by it).
"""
