"""SSD320's trunk is NVIDIA's: TF-slim's ``resnet_v1_50`` (the ``tf-slim`` package's own code,
built in ``tf.compat.v1`` graph mode with random weights and saved as a real TF1 checkpoint)
loads through ``--backbone_checkpoint`` and gives slim's feature maps; SSD320 with it has NVIDIA's
parameter count; and ``main.py`` trains from such a checkpoint."""
import importlib
import os
import pkgutil
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT
from conftest import TINY as PRESET_TINY

from common import runner
from common.data.images import STD
from ssd import backbone
from ssd.model import build_ssd
from ssd.task import SSDTask

# The mapping of slim's names onto the trunk is this repository's code; reading a checkpoint's
# tensors (tf.train) is tested on both stacks by the checkpoint and fine-tuning tests.
pytestmark = pytest.mark.one_stack(
    "pip", "slim's names mapped onto the trunk are this repository's code, the same on both "
    "stacks; checkpoints are read on both by the checkpoint and fine-tuning tests")

tf1 = tf.compat.v1
slim = pytest.importorskip("tf_slim", reason="tf-slim is a test dependency "
                           "(scripts/install_test_deps.sh installs it)")
from tf_slim.nets import resnet_utils, resnet_v1  # noqa: E402


def _legacy_layers_alias():
    """tf.compat.v1's layers (which slim's batch norm builds on) load ``tf_keras.
    legacy_tf_layers``; tf-keras 2.18 and later keep it at ``tf_keras.src.legacy_tf_layers``."""
    try:
        importlib.import_module("tf_keras.legacy_tf_layers")
    except ModuleNotFoundError:
        src = importlib.import_module("tf_keras.src.legacy_tf_layers")
        sys.modules["tf_keras.legacy_tf_layers"] = src
        for sub in pkgutil.iter_modules(src.__path__):
            sys.modules[f"tf_keras.legacy_tf_layers.{sub.name}"] = importlib.import_module(
                f"tf_keras.src.legacy_tf_layers.{sub.name}")


_legacy_layers_alias()

MAIN = os.path.join(ROOT, "ssd320", "main.py")
# The tiny trunk, in slim's own block form (one unit per block, width 8).
TINY_BLOCKS = [resnet_v1.resnet_v1_block(f"block{i + 1}", base_depth=8 * 2 ** i, num_units=1,
                                         stride=2 if i < 3 else 1) for i in range(4)]




def _randomise_batch_norms(session, seed):
    rng = np.random.default_rng(seed)
    for v in tf1.global_variables():
        name = v.op.name
        n = v.shape[-1] if v.shape.rank else None
        if name.endswith("moving_mean"):
            session.run(v.assign(0.1 * rng.standard_normal(n).astype(np.float32)))
        elif name.endswith("moving_variance"):
            session.run(v.assign((0.5 + rng.random(n)).astype(np.float32)))
        elif name.endswith("gamma"):
            session.run(v.assign((0.5 + rng.random(n)).astype(np.float32)))
        elif name.endswith("beta"):
            session.run(v.assign(0.1 * rng.standard_normal(n).astype(np.float32)))


def slim_checkpoint(path, images, tiny=False, v1_format=False):
    """Slim's resnet_v1_50 (or its tiny form) with random weights saved at ``path``; returns
    its block end points on ``images`` (slim's input: x - mean), inference mode: strided
    (``resnet_v1`` as it is) and non-strided (the units of each block at stride 1 and the next
    block on the decimated map, as TF-OD's ``store_non_strided_activations`` runs them)."""
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(0)
        tf1.train.get_or_create_global_step()  # as the release's training wrote it
        x = tf1.placeholder(tf.float32, [None, *images.shape[1:]])
        # resnet_arg_scope (decay 0.997, epsilon 1e-5, scale) with NVIDIA's override's ReLU6
        # on every convolution that has an activation (slim's shortcut and conv3 have none).
        with slim.arg_scope(resnet_utils.resnet_arg_scope()), \
                slim.arg_scope([slim.conv2d], activation_fn=tf.nn.relu6):
            if tiny:
                _, points = resnet_v1.resnet_v1(x, TINY_BLOCKS, num_classes=None,
                                                is_training=False, global_pool=False,
                                                scope="resnet_v1_50")
            else:
                _, points = resnet_v1.resnet_v1_50(x, num_classes=1000, is_training=False)
            # The non-strided form with slim's own units, reusing the variables.
            with tf1.variable_scope("resnet_v1_50", reuse=True), \
                    slim.arg_scope([slim.batch_norm], is_training=False):
                net = resnet_utils.conv2d_same(x, 64, 7, stride=2,
                                               scope="conv1")
                net = slim.max_pool2d(net, [3, 3], stride=2, scope="pool1")
                full = {}
                blocks = TINY_BLOCKS if tiny else [
                    resnet_v1.resnet_v1_block("block1", 64, 3, 2),
                    resnet_v1.resnet_v1_block("block2", 128, 4, 2),
                    resnet_v1.resnet_v1_block("block3", 256, 6, 2),
                    resnet_v1.resnet_v1_block("block4", 512, 3, 1)]
                for block in blocks:
                    with tf1.variable_scope(block.scope):
                        for i, unit in enumerate(block.args):
                            with tf1.variable_scope(f"unit_{i + 1}"):
                                net = block.unit_fn(net, **{**unit, "stride": 1})
                    full[block.scope] = net
                    net = resnet_utils.subsample(net, block.args[-1]["stride"])
        with tf1.Session(graph=graph) as session:
            session.run(tf1.global_variables_initializer())
            _randomise_batch_norms(session, 1)
            version = tf1.train.SaverDef.V1 if v1_format else tf1.train.SaverDef.V2
            tf1.train.Saver(tf1.global_variables(), write_version=version).save(
                session, path, write_meta_graph=False)
            names = ["resnet_v1_50/block2", "resnet_v1_50/block3", "resnet_v1_50/block4"]
            out = session.run([points[n] for n in names]
                              + [full[b] for b in ("block2", "block3", "block4")], {x: images})
    return out[:3], out[3:]


def _trunk_outputs(model):
    names = [model.get_layer(n).output for n in
             ("block2_unit_4_out", "block3_unit_6_out", "block4_unit_3_out")
             if n in {layer.name for layer in model.layers}]
    return names


def _assert_close(ours, theirs):
    scale = float(np.abs(theirs).max())
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-5 * max(scale, 1.0))


@pytest.fixture(scope="module")
def slim_resnet_v1_50(tmp_path_factory):
    """slim's resnet_v1_50 checkpoint, an image and slim's end points on it."""
    images = np.random.default_rng(0).standard_normal((1, 320, 320, 3)).astype(np.float32)
    prefix = str(tmp_path_factory.mktemp("slim") / "resnet_v1_50.ckpt")
    return prefix, images, *slim_checkpoint(prefix, images * np.float32(STD))


def test_slim_resnet_v1_50_checkpoint_gives_slims_feature_maps(slim_resnet_v1_50):
    prefix, images, strided, nonstrided = slim_resnet_v1_50
    names = {n for n, _ in tf.train.list_variables(prefix)}
    assert len(names) == 265 + 2 + 1  # the trunk, the classifier, global_step
    model = build_ssd("resnet50", num_classes=90, image_size=320, trunk="resnet_v1")
    line = backbone.load_trunk(model, prefix, "resnet50", "resnet_v1", "same")
    assert "106 trunk layers" in line and "classifier left out" in line, line
    trunk = tf.keras.Model(model.input, [model.get_layer(n).output for n in
                                         ("block2_unit_4_out", "block3_unit_6_out",
                                          "block4_unit_3_out")])
    c3, c4, c5 = (t.numpy() for t in trunk(images, training=False))
    assert c3.shape == (1, 40, 40, 512) and c4.shape == (1, 20, 20, 1024)
    assert c5.shape == (1, 10, 10, 2048)
    # TF-OD's non-strided end points, whole; slim's own network's strided ones at every
    # other position.
    for ours, theirs in zip((c3, c4, c5), nonstrided):
        _assert_close(ours, theirs)
    for ours, theirs in zip((c3[:, ::2, ::2], c4[:, ::2, ::2], c5), strided):
        _assert_close(ours, theirs)


def _count(variables):
    return int(sum(np.prod(v.shape) for v in variables))


def test_parameter_count_is_nvidias_ssd320_v1_2():
    """From the architecture: slim's resnet_v1_50 without its classifier (convolutions without
    bias, batch norm scale and offset), NVIDIA's FPN, towers and heads for 90 classes."""
    model = build_ssd("resnet50", num_classes=90, image_size=320, trunk="resnet_v1")
    units, widths = (3, 4, 6, 3), (64, 128, 256, 512)
    trunk = 7 * 7 * 3 * 64 + 2 * 64
    c_in = 64
    for n, w in zip(units, widths):
        for u in range(n):
            trunk += c_in * w + w * w * 9 + w * 4 * w + 2 * (w + w + 4 * w)
            if u == 0:
                trunk += c_in * 4 * w + 2 * 4 * w
            c_in = 4 * w
    conv3 = 3 * 3 * 256 * 256
    fpn = (512 + 1024 + 2048 + 3) * 256 + 4 * (conv3 + 2 * 256)
    towers = 2 * 4 * conv3 + 2 * 4 * 5 * 2 * 256
    heads = (3 * 3 * 256 * 24 + 24) + (3 * 3 * 256 * 6 * 91 + 6 * 91)
    assert trunk == 23_508_032  # torchvision's ResNet-50 less its classifier: the same shapes
    assert _count(model.trainable_variables) == trunk + fpn + towers + heads == 32_840_570
    assert model.get_layer("block1_unit_1_conv1_bn").momentum == 0.997
    assert model.get_layer("block1_unit_1_conv1_bn").epsilon == 1e-5
    assert model.get_layer("conv1_relu6").max_value == 6.0


TINY = [*PRESET_TINY, "--image_size", "64", "--batch_size", "2", "--lr_warmup_steps", "1",
        "--iter_unit", "batch", "--num_iter", "2"]


# `make test-slow` (the suite's time budget): the mapping of slim's names is the test above;
# main.py's start from a checkpoint is test_finetune's.
@pytest.mark.slow
def test_main_trains_from_a_slim_checkpoint_and_refuses_a_wrong_one(tmp_path, shapes_records,
                                                                   slim_resnet_v1_50, capsys):
    images = np.zeros((1, 64, 64, 3), np.float32)
    # As resnet_v1_50_2016_08_28.tar.gz holds it: one file in TF1's first format, no state file.
    prefix = str(tmp_path / "slim" / "resnet_v1_50.ckpt")
    os.makedirs(os.path.dirname(prefix))
    slim_checkpoint(prefix, images, tiny=True, v1_format=True)
    os.remove(tmp_path / "slim" / "checkpoint")
    assert os.listdir(tmp_path / "slim") == ["resnet_v1_50.ckpt"]
    reader = tf.train.load_checkpoint(prefix)
    summary = runner.run(SSDTask, ["main.py", *TINY, "--mode", "train", "--data_dir",
                                   shapes_records, "--backbone_checkpoint",
                                   os.path.dirname(prefix), "--results_dir",
                                   str(tmp_path / "run"), "--seed", "1"])
    assert summary["final_step"] == 2
    # Before a step the trunk held slim's weights (the root convolution scaled by the std).
    model = build_ssd("resnet_tiny", num_classes=4, image_size=64)
    backbone.load_trunk(model, prefix, "resnet_tiny", "resnet_v1", "same")
    np.testing.assert_allclose(model.get_layer("conv1").kernel.numpy(),
                               reader.get_tensor("resnet_v1_50/conv1/weights")
                               * np.float32(STD)[None, None, :, None], rtol=1e-6)
    np.testing.assert_array_equal(
        model.get_layer("block3_unit_1_conv2_bn").moving_variance.numpy(),
        reader.get_tensor("resnet_v1_50/block3/unit_1/bottleneck_v1/conv2/BatchNorm/"
                          "moving_variance"))
    # ResNet-50's checkpoint does not fit the tiny trunk: one line, exit 1.
    capsys.readouterr()
    assert runner.main(SSDTask, ["main.py", *TINY, "--mode", "train", "--results_dir",
                                 str(tmp_path / "bad"), "--backbone_checkpoint",
                                 slim_resnet_v1_50[0]]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"main.py: error: --backbone_checkpoint {slim_resnet_v1_50[0]} "
                              "holds 180 trunk tensors --arch resnet_tiny does not have"), err
