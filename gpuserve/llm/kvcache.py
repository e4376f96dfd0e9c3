"""A paged KV cache with a prefix cache, counted in blocks.

Every block is in one of three states: free; held by a running sequence (privately, or
shared under a prefix key); or cached: keyed, held by nobody, kept for a later request with
the same prefix until the space is needed, the least recently released evicted first.
Only counts and keys are tracked; which physical block is which does not matter here.

A prefix key is a chain hash: block i's key is derived from block i-1's key and block i's
own content hash, so it stands for the whole prefix 0..i and a block's content only matches
after the same preceding blocks, as in vLLM.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

_CHAIN_SEED = 0x9E3779B97F4A7C15  # any fixed value; the first block's key depends on it


def chain_keys(block_hashes: Sequence[int]) -> tuple[int, ...]:
    """Prefix keys of consecutive blocks from their content hashes. Python's hash of a
    tuple of ints does not depend on the process (only str and bytes hashes are salted), so
    the keys are the same in the emulator and the simulator."""
    keys: list[int] = []
    previous = _CHAIN_SEED
    for content in block_hashes:
        previous = hash((previous, int(content)))
        keys.append(previous)
    return tuple(keys)


class KVCache:
    """Block accounting for one engine: ``num_blocks`` blocks of equal size."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._free = num_blocks  # blocks holding nothing
        self._refs: dict[int, int] = {}  # prefix key -> sequences holding it
        self._cached: OrderedDict[int, None] = OrderedDict()  # keys held by none, LRU first
        self.evictions = 0

    # ---------------------------------------------------------------- state
    @property
    def held_blocks(self) -> int:
        """Blocks some running sequence holds (what vLLM reports as KV-cache usage)."""
        return self.num_blocks - self._free - len(self._cached)

    @property
    def cached_blocks(self) -> int:
        """Keyed blocks nobody holds, kept for a later hit."""
        return len(self._cached)

    @property
    def available(self) -> int:
        """Blocks an allocation can take: the free ones and then the cached ones."""
        return self._free + len(self._cached)

    def __contains__(self, key: int) -> bool:
        return key in self._refs

    # ---------------------------------------------------------------- prefix cache
    def match(self, keys: Sequence[int]) -> int:
        """How many leading ``keys`` are cached or held (the prefix a request can reuse)."""
        count = 0
        for key in keys:
            if key not in self._refs:
                break
            count += 1
        return count

    def idle_among(self, keys: Sequence[int]) -> int:
        """How many of ``keys`` nobody holds: taking them removes them from ``available``."""
        return sum(1 for key in keys if self._refs.get(key) == 0)

    def acquire(self, keys: Sequence[int]) -> None:
        """Holds existing keyed blocks (a prefix hit)."""
        for key in keys:
            refs = self._refs[key]
            if refs == 0:
                del self._cached[key]
            self._refs[key] = refs + 1

    def release(self, keys: Sequence[int]) -> None:
        """Lets go of keyed blocks. The deepest block is released first, so it is also
        evicted first: a prefix's root outlives its tail, which is useless without it."""
        for key in reversed(keys):
            refs = self._refs[key] - 1
            self._refs[key] = refs
            if refs == 0:
                self._cached[key] = None

    def publish(self, key: int) -> None:
        """A private block just filled with the content ``key`` names: it becomes keyed.
        If another sequence published the same key meanwhile, the private copy is freed
        and the existing block is held instead."""
        if key in self._refs:
            self.acquire([key])
            self._free += 1
        else:
            self._refs[key] = 1

    # ---------------------------------------------------------------- private blocks
    def allocate(self, count: int) -> None:
        """Takes ``count`` private blocks, evicting cached ones when no free block is left;
        the caller checks ``available`` first."""
        if count <= self._free:  # the usual case, once per engine step
            self._free -= count
            return
        if count > self.available:
            raise RuntimeError(f"allocate: {count} blocks wanted, {self.available} available")
        from_free = min(count, self._free)
        self._free -= from_free
        for _ in range(count - from_free):
            key, _ = self._cached.popitem(last=False)
            del self._refs[key]
            self.evictions += 1

    def free(self, count: int) -> None:
        """Returns private blocks."""
        self._free += count
