"""What a ``--profile`` run computed in 16 bits, op by op, against the lists of TensorFlow's
automatic mixed precision graph rewrite: the AMP of NVIDIA's TF1 model scripts
(``TF_ENABLE_AUTO_MIXED_PRECISION=1`` there).

    python -m benchtools.amp_lists results/ssd_amp [--show 20]

The argument is a run directory profiled with ``--profile`` (or its ``ops.csv``). This
repository's ``--amp`` is Keras' mixed precision, which decides by layer: a layer computes in its
dtype policy's type, and a model keeps float32 where it says so (SSD320's output concatenations
and, under bfloat16, its feature pyramid; ``--float32_parts``). The graph rewrite decided by op
type instead (``tensorflow/core/grappler/optimizers/auto_mixed_precision_lists.h``):

- *allow*: always 16-bit, the convolutions and matrix multiplications;
- *infer*: 16-bit where their inputs are (additions, bias additions, batch norms, most
  activations, multiplications);
- *deny*: float32, and so is what they feed until an allow op (``Exp``, ``Mean``, ``Sum``,
  ``Pow``, the softmax cross-entropies, ``L2Loss``);
- *clear*: the type of their input (reshapes, concatenations, ReLU, max pooling, selects);
- every other op stays float32.

The page gives each op type's list and the time (ms per profiled step) and count of its ops in
16 bits and in float32, then the ops where this run and the rewrite differ by rule: an allow op
in float32 (the rewrite would run it in 16 bits) and a deny op in 16 bits (it would keep it in
float32). An infer or clear op's type under the rewrite depends on its inputs, which an op table
does not hold, so those are counted, not flagged. On a CPU, oneDNN's names (``_MklNativeConv2D``,
``_MklNativeFusedConv2D``, ``..WithBias``) are read as the op they compute.
"""
from __future__ import annotations

import argparse
import re
import sys

from benchtools.profile_diff import DiffError, load
from common.errors import reported

# The rewrite's lists for CUDA, by the op types TensorFlow names (the header above).
ALLOW = frozenset("""
    BatchMatMul BatchMatMulV2 BatchMatMulV3 BlockLSTM BlockLSTMGrad BlockLSTMGradV2 BlockLSTMV2
    Conv2D Conv2DBackpropFilter Conv2DBackpropInput Conv3D Conv3DBackpropFilter
    Conv3DBackpropFilterV2 Conv3DBackpropInput Conv3DBackpropInputV2 CudnnRNN CudnnRNNBackprop
    CudnnRNNBackpropV2 CudnnRNNBackpropV3 CudnnRNNV2 CudnnRNNV3 Einsum GRUBlockCell
    GRUBlockCellGrad LSTMBlockCell LSTMBlockCellGrad MatMul""".split())
INFER = frozenset("""
    Add AddN AddV2 AvgPool AvgPool3D AvgPool3DGrad AvgPoolGrad BiasAdd BiasAddGrad BiasAddV1 Elu
    EluGrad Erf Erfc FloorDiv FusedBatchNormGradV2 FusedBatchNormGradV3 FusedBatchNormV2
    FusedBatchNormV3 Inv LeakyRelu LeakyReluGrad Log Log1p LogSoftmax Mul Prod RealDiv
    Reciprocal Selu SeluGrad Sigmoid SigmoidGrad Softmax Softplus SoftplusGrad Softsign
    SoftsignGrad Sqrt Sub Tanh TanhGrad""".split())
DENY = frozenset("""
    Exp Expm1 L2Loss Mean Pow SaveV2 SoftmaxCrossEntropyWithLogits
    SparseSoftmaxCrossEntropyWithLogits Sum""".split())
CLEAR = frozenset("""
    Abs ArgMax ArgMin BatchToSpace BatchToSpaceND BroadcastTo Ceil CheckNumerics ClipByValue
    Concat ConcatV2 DepthToSpace DynamicPartition DynamicStitch EnsureShape Equal ExpandDims Fill
    Floor Gather GatherNd GatherV2 Greater GreaterEqual Identity IdentityN IsFinite IsInf IsNan
    Less LessEqual Max MaxPool MaxPool3D MaxPool3DGrad MaxPool3DGradGrad MaxPoolGrad
    MaxPoolGradGrad MaxPoolGradGradV2 MaxPoolGradV2 MaxPoolV2 Maximum Min Minimum MirrorPad
    MirrorPadGrad Neg NotEqual OneHot OnesLike Pack Pad PadV2 PreventGradient Rank Relu Relu6
    Relu6Grad ReluGrad Reshape ResizeNearestNeighbor ResizeNearestNeighborGrad Reverse
    ReverseSequence ReverseV2 Round Select SelectV2 Shape ShapeN Sign Size Slice Snapshot
    SpaceToBatch SpaceToBatchND SpaceToDepth Split SplitV Squeeze StopGradient StridedSlice
    StridedSliceGrad Tile TopK TopKV2 Transpose Where ZerosLike""".split())
LISTS = {"allow": ALLOW, "infer": INFER, "deny": DENY, "clear": CLEAR}

SIXTEEN = ("bfloat16", "float16")
# oneDNN's and grappler's names for what is one of the ops above: _MklNativeConv2D,
# _MklNativeFusedConv2D (a convolution with its bias and activation), _MklMatMul,
# _MklNativeConv2DBackpropFilterWithBias, _FusedMatMul, _FusedBatchNormEx.
_PREFIX = re.compile(r"^_(?:MklNative|Mkl)?")
_FUSED = re.compile(r"^Fused(Conv2D|Conv3D|MatMul|DepthwiseConv2dNative|BatchMatMulV2)$")


def base_type(op_type: str) -> str:
    """The TensorFlow op a (possibly oneDNN-renamed or fused) op type computes."""
    name = _PREFIX.sub("", op_type)
    name = _FUSED.sub(r"\1", name).removesuffix("WithBias")
    return "FusedBatchNormV3" if name == "FusedBatchNormEx" else name


def rewrite_list(op_type: str) -> str:
    """allow, infer, deny, clear or none (float32 under the rewrite)."""
    base = base_type(op_type)
    return next((name for name, ops in LISTS.items() if base in ops), "none")


KINDS = ("16-bit", "float32", "other")


def kind(dtype: str) -> str:
    """16-bit, float32 or other (casts, integers, strings, ops without a type)."""
    return "16-bit" if dtype in SIXTEEN else "float32" if dtype == "float32" else "other"


def _ms(entry: dict) -> float:
    """An op type's time per step, all its kinds together."""
    return sum(entry[k][0] for k in KINDS)


def tabulate(rows) -> dict:
    """By base op type: its list and {16-bit, float32, other: [ms per step, ops]}; and the
    two disagreements by rule (op rows, most time first)."""
    types: dict[str, dict] = {}
    for r in rows:
        if r["op_type"] == "(other ops)":
            continue
        base = base_type(r["op_type"])
        entry = types.setdefault(base, {"list": rewrite_list(base),
                                        **{k: [0.0, 0] for k in KINDS}})
        cell = entry[kind(r["dtype"])]
        cell[0] += r["ms_per_step"]
        cell[1] += 1
    ordered = sorted(rows, key=lambda r: -r["ms_per_step"])
    return {"types": types,
            "allow_in_float32": [r for r in ordered if kind(r["dtype"]) == "float32"
                                 and rewrite_list(r["op_type"]) == "allow"],
            "deny_in_16bit": [r for r in ordered if kind(r["dtype"]) == "16-bit"
                              and rewrite_list(r["op_type"]) == "deny"]}


def render(label: str, table: dict, show: int = 20) -> str:
    types = table["types"]
    total = sum(map(_ms, types.values()))
    sixteen = sum(e["16-bit"][0] for e in types.values())
    lines = [label, f"{sixteen:.2f} of {total:.2f} ms/step of op time in 16-bit ops "
             f"({sixteen / total:.0%})" if total else "no op time", "",
             "| op type | rewrite's list | 16-bit ms/step (ops) | float32 ms/step (ops) | "
             "other ms/step (ops) |", "|---|---|---:|---:|---:|"]
    order = (*LISTS, "none")
    for name, e in sorted(types.items(), key=lambda kv: (order.index(kv[1]["list"]),
                                                         -_ms(kv[1]))):
        cells = " | ".join(f"{e[k][0]:.2f} ({e[k][1]})" if e[k][1] else "-" for k in KINDS)
        lines.append(f"| {name} | {e['list']} | {cells} |")
    for key, what in (("allow_in_float32", "allow-list ops in float32 here (the rewrite runs "
                       "them in 16 bits)"),
                      ("deny_in_16bit", "deny-list ops in 16 bits here (the rewrite keeps "
                       "them in float32)")):
        found = table[key]
        ms = sum(r["ms_per_step"] for r in found)
        lines += ["", f"{len(found)} {what}: {ms:.2f} ms/step" + (":" if found else "")]
        lines += [f"  {r['op_name']} ({r['op_type']}, {r['dtype']}) {r['ms_per_step']:.2f}"
                  for r in found[:show]]
        if len(found) > show:
            lines.append(f"  ... {len(found) - show} more")
    infer32 = float32_types(types, "infer")
    if infer32:
        lines += ["", "infer-list op types with float32 ops (16-bit under the rewrite only "
                  "where their inputs are): " + ", ".join(infer32)]
    return "\n".join(lines)


def float32_types(types: dict, list_name: str) -> list[str]:
    """The op types of ``list_name`` that ran some ops in float32, most float32 time first."""
    found = [(e["float32"][0], name) for name, e in types.items()
             if e["list"] == list_name and e["float32"][1]]
    return [name for _, name in sorted(found, reverse=True)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchtools.amp_lists",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="a run directory profiled with --profile, or its ops.csv")
    p.add_argument("--show", type=int, default=20,
                   help="ops listed under each disagreement (most time first)")
    args = p.parse_args(argv)
    return reported("amp_lists", lambda: _show(args), {DiffError: 2, OSError: 2})


def _show(args) -> int:
    if args.show < 0:
        raise DiffError(f"--show {args.show}: a number of ops, 0 or more")
    label, rows, _ = load(args.run)
    print(render(label, tabulate(rows), args.show))
    return 0


if __name__ == "__main__":
    sys.exit(main())
