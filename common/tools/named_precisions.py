"""The precisions the launchers and tools name (``amp``, ``tf32``, ``fp32``) and the ``main.py``
flags each means; on a CPU, amp means bfloat16 (``common/precision.py`` decides the dtype). No
TensorFlow import: ``scripts/launch.sh`` keeps a copy of the table, which the tests hold to
this one (``python -m common.tools.named_precisions amp`` prints its flags).
"""
from __future__ import annotations

import sys

# Precision -> main.py flags. fp32 turns TF32 off (on Ampere and later it is on by default).
PRECISION_FLAGS = {"fp32": ("--no_tf32",), "tf32": ("--tf32",), "amp": ("--amp",)}


def precision_flags(name: str) -> list[str]:
    if name not in PRECISION_FLAGS:
        raise ValueError(f"precision must be {', '.join(PRECISION_FLAGS)}, not {name}")
    return list(PRECISION_FLAGS[name])


def compute_dtype(name: str, gpu: bool) -> str:
    """The type the matmuls of a precision run in: what a benchmark's ceiling is measured in."""
    if name == "amp":
        return "float16" if gpu else "bfloat16"
    return "float32"


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in PRECISION_FLAGS:
        print(f"usage: python -m common.tools.named_precisions {{{','.join(PRECISION_FLAGS)}}}",
              file=sys.stderr)
        sys.exit(2)
    print(" ".join(PRECISION_FLAGS[sys.argv[1]]))
