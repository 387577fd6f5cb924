"""NVIDIA's TensorFlow ResNet-50 v1.5 checkpoints from NGC, by the names of DeepLearningExamples'
``TensorFlow/Classification/ConvNets/model/resnet.py`` (``resnet50/conv2d/conv2d/kernel``,
``resnet50/btlnck_block_0_0/bottleneck_1/BatchNorm/gamma`` ...): the same network and padding;
NVIDIA's 1001st (background) logit dropped; optimizer slots and the step left."""
from __future__ import annotations

from common.errors import DataError, one_line
from rn50.imported import Imported, blocks, leftovers, take

_NV_SCOPE = "resnet50"
_NV_BN = ("gamma", "beta", "moving_mean", "moving_variance")


def from_nvidia(path: str, arch: str) -> Imported:
    import tensorflow as tf
    try:
        reader = tf.train.load_checkpoint(path)
    except (tf.errors.OpError, ValueError) as e:
        raise DataError(f"{path} is not a readable TensorFlow checkpoint prefix "
                        f"({one_line(getattr(e, 'message', str(e)))[:200]})") from None
    from common.checkpoint import store
    damaged = store.unreadable(path)  # every tensor read: a cut or bit-flipped .data
    if damaged:
        raise DataError(f"{path}: the checkpoint is damaged ({damaged}): download it again")
    names = reader.get_variable_to_shape_map()
    source = _LazyReader(reader, names)
    used, out = set(), {}
    s0 = _NV_SCOPE

    def conv_bn(ours, conv_kernel, bn_scope):
        out[(f"{ours}_conv", "kernel")] = take(source, conv_kernel, used, path)
        for w in _NV_BN:
            out[(f"{ours}_bn", w)] = take(source, f"{bn_scope}/BatchNorm/{w}", used, path)

    conv_bn("stem", f"{s0}/conv2d/conv2d/kernel", f"{s0}/conv2d")
    for s, b in blocks(arch):
        block = f"{s0}/btlnck_block_{s - 1}_{b - 1}"
        for k in (1, 2, 3):
            conv_bn(f"stage{s}_block{b}_{k}", f"{block}/bottleneck_{k}/conv2d/kernel",
                    f"{block}/bottleneck_{k}")
        if b == 1:
            conv_bn(f"stage{s}_block{b}_proj", f"{block}/shortcut/conv2d/conv2d/kernel",
                    f"{block}/shortcut/conv2d")
    notes, classes = [], 0
    if f"{s0}/output/dense/kernel" in names:
        kernel = take(source, f"{s0}/output/dense/kernel", used, path)
        bias = take(source, f"{s0}/output/dense/bias", used, path)
        if kernel.shape[1] == 1001:  # NVIDIA's background class 0, never a label
            kernel, bias = kernel[:, 1:], bias[1:]
            notes.append("NVIDIA's classifier has 1001 outputs; the first (a background class "
                         "its ImageNet records never use) was dropped: 1000 classes")
        out[("logits", "kernel")], out[("logits", "bias")] = kernel, bias
        classes = bias.shape[0]
    # The model's tensors are under its scope; an optimizer slot extends a model tensor's name.
    leftovers({k: None for k in names if k.startswith(s0 + "/")}, used, path,
               ignore=lambda k: any(k.startswith(u + "/") for u in used))
    others = [k for k in names if not k.startswith(s0 + "/")]
    if others:
        notes.append(f"left {len(others)} training-state tensors outside {s0}/ "
                     f"({', '.join(sorted(others)[:3])}{', ...' if len(others) > 3 else ''})")
    return Imported(out, classes, "same", notes)


class _LazyReader(dict):
    """A checkpoint reader as a mapping (tensors read when taken)."""

    def __init__(self, reader, names):
        super().__init__({k: None for k in names})
        self.reader = reader

    def __getitem__(self, key):
        return self.reader.get_tensor(key)


# --- keras.applications.ResNet50 ------------------------------------------------------------
