"""What a run ran on, in one line for its log: the accelerators, else the CPU."""
from __future__ import annotations

import os

from common.runtime.devices import Devices, cpu_flags


def cpu_name() -> str:
    """The CPU's model name and its bfloat16 support, from /proc/cpuinfo where there is one."""
    name = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    name = value.strip()
                    break
    except OSError:
        pass
    bf16 = " with bfloat16 instructions" if cpu_flags() & {"avx512_bf16", "amx_bf16"} else ""
    return f"{os.cpu_count()} x {name or 'CPU'}{bf16}"


def describe(devices: Devices) -> str:
    """"NVIDIA A100-SXM4-80GB (GPU 3 of 8)" on a GPU machine, "2 x AMD EPYC 9R14 with bfloat16
    instructions, no GPU" on a CPU one: the GPU this process computes on, not the node's."""
    if not devices.gpu:
        return f"{cpu_name()}, no GPU"
    return f"{devices.gpu_name} (GPU {devices.gpu_index} of {devices.visible_gpus})"
