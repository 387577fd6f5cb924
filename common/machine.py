"""What a run ran on, in one line for its log: the accelerators, else the CPU."""
from __future__ import annotations

import os

import tensorflow as tf


def cpu_name() -> str:
    """The CPU's model name and its bfloat16 support, from /proc/cpuinfo where there is one."""
    name, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not name:
                    name = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    bf16 = " with bfloat16 instructions" if flags & {"avx512_bf16", "amx_bf16"} else ""
    return f"{os.cpu_count()} x {name or 'CPU'}{bf16}"


def describe() -> str:
    """"2 x NVIDIA A100-SXM4-80GB" on a GPU machine, "2 x AMD EPYC 9R14 with bfloat16
    instructions, no GPU" on a CPU one (the GPUs this process sees, not the node's)."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return f"{cpu_name()}, no GPU"
    names = [tf.config.experimental.get_device_details(g).get("device_name", "GPU") for g in gpus]
    return ", ".join(f"{names.count(n)} x {n}" for n in dict.fromkeys(names))
