"""How many tokens a Mooncake-format trace's hash ids stand for, read from its rows."""

from __future__ import annotations

import json

import pytest

from gpuserve.sim.llm.traces import hash_block_size
from gpuserve.sim.trace_rows import MooncakeRow, read_mooncake_rows


def _rows(*prompts: tuple[int, int]) -> list[MooncakeRow]:
    """One row per (input_length, number of hash ids)."""
    return read_mooncake_rows(
        json.dumps({"timestamp": k, "input_length": n, "output_length": 1, "hash_ids": [*range(i)]})
        for k, (n, i) in enumerate(prompts)
    )


@pytest.mark.parametrize(
    ("prompts", "size"),
    [
        (((1000, 2), (512, 1), (513, 2)), 512),  # Mooncake's own
        (((40, 3), (17, 2), (16, 1)), 16),  # [14, 16] fit; 16 is a power of two
        (((100, 1), (300, 1)), 512),  # one id each: any size from 300 fits, 512 among them
        (((900, 1),), 512),  # as 900 tokens' one full 512-token block
        (((2000, 1), (100, 1)), 2048),  # ids covering the whole prompt only: any from 2000
        (((81, 5),), 16),  # whole prompt [17, 20], full blocks [14, 16]: 16 the power of two
        (((40, 2), (17, 1), (1615, 100)), 16),  # full blocks only (vLLM's): 16
        (((90, 3), (61, 2)), 32),  # [31, 44] fit: 32 the one power of two
        (((21, 3), (20, 2)), 10),  # 10 (whole prompt) or 7 (full blocks): no power of two
        (((10, 0),), 512),  # no hashes: nothing to agree on
    ],
)
def test_the_size_every_row_agrees_on(prompts: tuple[tuple[int, int], ...], size: int) -> None:
    assert hash_block_size(_rows(*prompts)) == size


@pytest.mark.parametrize(
    ("prompts", "line"),
    [
        (((1000, 2), (100, 3)), 2),  # 512-token blocks, then three ids for 100 tokens
        (((5, 2), (8, 2), (4000, 2)), 3),  # 4 tokens per id, then 2000
        (((0, 1),), 1),  # an id for an empty prompt
    ],
)
def test_rows_no_size_fits_are_refused_naming_the_first(
    prompts: tuple[tuple[int, int], ...], line: int
) -> None:
    with pytest.raises(ValueError, match=f"^line {line}: .* no number of tokens per id fits it"):
        hash_block_size(_rows(*prompts))
