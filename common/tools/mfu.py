"""Model FLOP utilisation: FLOPs of a model's convolutions and matmuls, and the machine's
practical ceiling measured as a chain of large matmuls in the same process."""
from __future__ import annotations

import time

import keras
import tensorflow as tf

from common import graph


def matmul_ceiling(dtype=tf.float32, n: int = 2048, reps: int = 20) -> float:
    """FLOP/s of dependent n x n matmuls in ``dtype``: the practical compute ceiling."""
    a = tf.cast(tf.random.normal((n, n)), dtype)
    b = tf.cast(tf.random.normal((n, n), stddev=n ** -0.5), dtype)  # keeps the scale steady

    @graph.function()
    def chain():
        x = a
        for _ in range(reps):  # each product feeds the next: nothing can be computed once
            x = tf.linalg.matmul(x, b)
        return x[0, 0]
    chain().numpy()  # trace and warm up
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        chain().numpy()
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - t0))
    return best


def forward_flops(model: keras.Model) -> int:
    """2 x multiply-adds of every convolution and dense layer for one example, counting each
    call of a layer that is shared (SSD's towers run on five pyramid levels)."""
    total = 0
    for layer in model.layers:
        if not isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            continue
        for node in layer._inbound_nodes:
            out = node.output_tensors[0].shape
            if isinstance(layer, keras.layers.Conv2D):
                kh, kw = layer.kernel_size
                total += 2 * out[1] * out[2] * out[3] * kh * kw * layer.kernel.shape[2]
            else:
                positions = 1
                for d in out[1:-1]:
                    positions *= d
                total += 2 * positions * layer.kernel.shape[0] * layer.kernel.shape[1]
    return int(total)


# FLOPs per op of a traced graph: 2 x multiply-adds of the matmuls and convolutions, the ops
# that the ceiling measures; what a model computes elsewhere (elementwise ops, reductions) is
# not counted, for any model alike.
def _matmul_flops(op) -> int:
    a, b = (t.shape for t in op.inputs[:2])
    out = op.outputs[0].shape
    if op.type == "MatMul":
        k = a[0] if op.get_attr("transpose_a") else a[1]
    else:  # BatchMatMul*: the contraction is a's last dim, or its second last when adjointed
        k = a[-2] if op.get_attr("adj_x") else a[-1]
    return 2 * out.num_elements() * int(k)


def _conv_flops(op) -> int:
    kernel = op.inputs[1].shape  # (kh, kw, in, out) or, depthwise, (kh, kw, in, multiplier)
    out = op.outputs[0].shape
    per_output = kernel[0] * kernel[1] * (1 if op.type.startswith("Depthwise") else kernel[2])
    return 2 * out.num_elements() * int(per_output)


_COUNTED = {"MatMul": _matmul_flops, "BatchMatMul": _matmul_flops,
            "BatchMatMulV2": _matmul_flops, "BatchMatMulV3": _matmul_flops,
            "Conv2D": _conv_flops, "DepthwiseConv2dNative": _conv_flops}


def graph_flops(fn, *args) -> int:
    """Forward FLOPs of one call of ``fn(*args)``, counted from the graph TensorFlow traces for
    it (every MatMul, BatchMatMul and Conv2D, with functions called inside it): the same count
    for this repository's models and for any Keras model it is compared with. Shapes must be
    static."""
    graphs, total = [graph.function(fn).get_concrete_function(*args).graph], 0
    seen = set()
    while graphs:
        g = graphs.pop()
        for op in g.get_operations():
            if op.type in _COUNTED:
                if any(d is None for t in op.outputs for d in t.shape):
                    raise ValueError(f"{op.name} has a dynamic shape: trace with static shapes")
                total += _COUNTED[op.type](op)
        for name, f in getattr(g, "_functions", {}).items():  # nested tf.functions
            if name not in seen:
                seen.add(name)
                graphs.append(f.graph if hasattr(f, "graph") else f)
    return int(total)
