"""Reading Triton's log: error lines, with the start-up noise of a GPU-less machine removed."""

from __future__ import annotations

import re

# glog prefix: severity letter, MMDD, time, thread id, file:line]
_GLOG = re.compile(r"^([IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+([^\]]+)\]\s?(.*)$")

# Beginnings of messages a CPU-only machine prints about its missing GPU; they say nothing
# about the model. Matched at the start only, so a model error that mentions CUDA is kept.
_HARMLESS = (
    "cudadriverhelper",
    "unable to allocate pinned",
    "failed to enable peer access",
    "unable to get cuda device count",
    "failed to initialize nvml",
    "failed to initialize dcgm",
    "dcgm",
    "nvml",
)


def error_lines(log: str, *, include_harmless: bool = False) -> list[str]:
    """The messages of error/fatal lines (``E...]``/``F...]``) and ``error:`` lines of a log.

    Start-up complaints about the missing GPU (CUDA driver, NVML, DCGM, pinned memory) are
    dropped unless ``include_harmless``; the model is not at fault for them.
    """
    found: list[str] = []
    for raw in log.splitlines():
        line = raw.strip()
        match = _GLOG.match(line)
        if match:
            if match.group(1) not in "EF":
                continue
            # Triton 2.51 quotes its messages: E... file.cc:12] "message"
            message = match.group(3).strip()
            if len(message) >= 2 and message[0] == message[-1] == '"':
                message = message[1:-1]
        elif line.lower().startswith("error:"):
            message = line
        elif line.startswith("[libprotobuf ERROR") and "] " in line:
            # config.pbtxt parse errors carry line:column, e.g. "13:12: ... no field named"
            message = line.split("] ", 1)[1].strip()
        else:
            continue
        if not include_harmless and message.lower().startswith(_HARMLESS):
            continue
        if message and message not in found:
            found.append(message)
    return found
