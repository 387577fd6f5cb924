"""ResNet-50 v1.5 from Keras' weights (``resnet50v1.5/import_weights.py --from keras`` and
``--from keras_hub``): keras.applications' weight files initialise the v1.5 network and answer
on Keras' own input; a keras-hub preset answers as keras-hub's own classifier, on its
converter's recipe; a preset of another network, or without its task's weights, is told in one
line."""
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from imported_weights import PHOTOS, imported, predict_and_export, same_answer

from common.checkpoint import settings as checkpoint_settings
from common.data import images
from rn50 import pretrained, weights_keras


# --- keras.applications.ResNet50 --------------------------------------------------------------
def _keras_resnet50(include_top=True):
    model = keras.applications.ResNet50(weights=None, include_top=include_top)
    rng = np.random.default_rng(2)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            n = layer.gamma.shape[0]
            layer.set_weights([0.5 + rng.random(n), 0.1 * rng.standard_normal(n),
                               0.1 * rng.standard_normal(n), 0.5 + rng.random(n)])
        elif isinstance(layer, keras.layers.Conv2D):
            kernel, bias = layer.get_weights()
            layer.set_weights([kernel, 0.1 * rng.standard_normal(bias.shape)])
    return model


def _save_legacy_h5(model, path):
    """The format of keras.applications' downloads (resnet50_weights_tf_dim_ordering_tf_kernels
    .h5): Keras 2's save_weights, layer_names and weight_names attributes."""
    import h5py
    from keras.src.legacy.saving import legacy_h5_format
    with h5py.File(path, "w") as f:
        legacy_h5_format.save_weights_to_hdf5_group(f, model)


# `make test-slow` (the suite's time budget): Keras Applications' import is
# test_keras_applications_import_predicts_and_serves_on_keras_own_input's.
@pytest.mark.slow
def test_keras_applications_weights_initialise_the_v15_network(tmp_path, capsys):
    app = _keras_resnet50()
    full = str(tmp_path / "resnet50_weights_tf_dim_ordering_tf_kernels.h5")
    _save_legacy_h5(app, full)
    model, settings, notes = imported("keras", full)
    assert settings["num_classes"] == 1000 and "v1" in notes[0] and "fine-tuning" in notes[0]
    # The stem is the same function: Keras' on its caffe input (BGR less the mean), ours on
    # the normalised RGB image; the conv bias and epsilon folded into the batch norm.
    x = np.random.default_rng(3).standard_normal((2, 224, 224, 3)).astype(np.float32)
    caffe = (x * np.float32(images.STD))[..., ::-1]
    theirs = keras.Model(app.input, app.get_layer("pool1_pool").output)(caffe).numpy()
    ours = keras.Model(model.input, model.get_layer("stem_pool").output)(x).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4 * np.abs(theirs).max())
    np.testing.assert_array_equal(model.get_layer("logits").kernel.numpy(),
                                  app.get_layer("predictions").kernel.numpy())
    # Keras 3's own weights file, without the top: the classifier starts fresh, with a line.
    notop = str(tmp_path / "notop.weights.h5")
    _keras_resnet50(include_top=False).save_weights(notop)
    assert pretrained.main([notop, str(tmp_path / "k"), "--from", "keras", "--num_classes",
                            "10"]) == 0
    said = capsys.readouterr().out
    assert "the classifier starts fresh: the source has no classes, the model 10" in said
    # A file of another network: one line.
    other = str(tmp_path / "other.weights.h5")
    keras.applications.ResNet101(weights=None).save_weights(other)
    assert pretrained.main([other, str(tmp_path / "o"), "--from", "keras"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"import_weights.py: error: {other} does not fit keras.applications.ResNet50"), err


def test_keras_applications_recipe_prepares_images_as_keras_does(tmp_path):
    """keras.applications' own pipeline (load_img(target_size=(224, 224)): nearest, squashed;
    caffe's BGR less the mean) is what the imported network sees through its recipe: the
    first convolution folds the channel order and NVIDIA's standard deviation, so the recipe's
    input times that deviation, channels reversed, is Keras' input, exactly. (The network is
    v1's weights in v1.5: its logits are not Keras', test_keras_applications_weights_...)."""
    from rn50 import eval_preprocessing as recipes
    from rn50 import tfdata_pipeline
    spec = recipes.keras_applications().spec()
    for photo in PHOTOS:
        ours = tfdata_pipeline.eval_image(tf.io.read_file(photo), 224,
                                          recipes.parse(spec, 224)).numpy()
        theirs = keras.applications.resnet50.preprocess_input(keras.utils.img_to_array(
            keras.utils.load_img(photo, target_size=(224, 224))))
        np.testing.assert_allclose((ours * np.float32(images.STD))[..., ::-1], theirs,
                                   atol=1e-4, err_msg=photo)


@pytest.mark.both_stacks
def test_keras_applications_import_predicts_and_serves_on_keras_own_input(tmp_path):
    """keras.applications' weights imported: main.py --mode predict and the exported
    serving_default, given the photographs' bytes, answer what the network answers on Keras'
    own pipeline's input (load_img(target_size=(224, 224)) and preprocess_input: BGR less the
    mean), turned to this network's (RGB, over NVIDIA's standard deviation, which the importer
    folded into the first convolution) and fed to the export's ``preprocessed``. (The logits are
    not keras.applications' own: v1's weights in v1.5, test above.)"""
    from rn50 import eval_preprocessing as recipes
    h5 = str(tmp_path / "resnet50_weights_tf_dim_ordering_tf_kernels.h5")
    _save_legacy_h5(_keras_resnet50(), h5)
    ckpt = tmp_path / "ckpt"
    assert pretrained.main([h5, str(ckpt), "--from", "keras"]) == 0
    assert checkpoint_settings.read(str(ckpt))["settings"]["eval_preprocessing"] == \
        recipes.keras_applications().spec()
    records, logits = predict_and_export(ckpt, tmp_path / "run")
    theirs = np.stack([keras.applications.resnet50.preprocess_input(keras.utils.img_to_array(
        keras.utils.load_img(p, target_size=(224, 224))))[..., ::-1] / np.float32(images.STD)
        for p in PHOTOS]).astype(np.float32)
    fn = tf.saved_model.load(str(tmp_path / "run" / "export")).signatures["preprocessed"]
    want = fn(images=tf.constant(theirs))["logits"].numpy()
    np.testing.assert_allclose(logits, want, rtol=0, atol=1e-4 * np.abs(want).max())
    assert records[0]["top5_classes"] == [int(c) for c in np.argsort(-want[0])[:5]]


# --- keras-hub ---------------------------------------------------------------------------------
def _keras_hub_classifier(converter=None, num_classes=1000):
    """keras-hub's ResNet-50 (resnet_50_imagenet's architecture) as an ImageClassifier with
    resnet_50_imagenet's image converter: random weights, batch norm statistics measured on the
    photographs (a fresh model's 0 and 1 would hide a swapped mean and variance)."""
    import keras_hub
    keras.utils.set_random_seed(7)
    backbone = keras_hub.models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[7],
        stackwise_num_filters=[64, 128, 256, 512], stackwise_num_blocks=[3, 4, 6, 3],
        stackwise_num_strides=[1, 2, 2, 2], block_type="bottleneck_block",
        use_pre_activation=False)
    converter = keras_hub.layers.ResNetImageConverter(
        **(converter or weights_keras.KERAS_HUB_DEFAULT_CONVERTER))
    classifier = keras_hub.models.ResNetImageClassifier(
        backbone=backbone, num_classes=num_classes,
        preprocessor=keras_hub.models.ResNetImageClassifierPreprocessor(converter))
    rng = np.random.default_rng(7)
    x = np.concatenate([converter(np.asarray(keras.utils.load_img(p), np.float32)[None])
                        for p in PHOTOS])
    for layer in backbone.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            n = layer.gamma.shape[0]
            layer.gamma.assign(rng.uniform(0.5, 1.5, n).astype(np.float32))
            layer.beta.assign(rng.normal(0, 0.2, n).astype(np.float32))
            layer.momentum = 0.0  # one pass in training mode sets the statistics
    backbone(x, training=True)
    head = classifier.get_layer("predictions")
    head.bias.assign(rng.normal(0, 0.1, num_classes).astype(np.float32))
    return classifier


@pytest.fixture(scope="module")
def keras_hub_preset(tmp_path_factory):
    """A keras-hub preset directory as save_to_preset writes it, and keras-hub's own logits on
    the photographs (keras.utils.load_img, then the classifier's predict: its converter)."""
    classifier = _keras_hub_classifier()
    preset = tmp_path_factory.mktemp("keras_hub") / "resnet_50"
    classifier.save_to_preset(str(preset))
    want = np.concatenate([classifier.predict(np.asarray(keras.utils.load_img(p))[None],
                                              verbose=0) for p in PHOTOS])
    return preset, want


def test_keras_hub_recipe_prepares_images_as_its_converter_does():
    """keras-hub's image converter as ImageClassifier.predict applies it (keras.layers.Resizing
    with crop_to_aspect_ratio, on the image as floats, as Keras' data adapter casts
    keras.utils.load_img's 8-bit array; x * scale + offset) and the recipe the importer records
    from it prepare the photographs alike: resnet_50_imagenet's (bicubic, the central square) and
    a stretching, bilinear, antialiased one."""
    import keras_hub

    from rn50 import eval_preprocessing as recipes
    from rn50 import tfdata_pipeline
    stretch = {**weights_keras.KERAS_HUB_DEFAULT_CONVERTER, "image_size": [160, 160],
               "crop_to_aspect_ratio": False, "interpolation": "bilinear", "antialias": True}
    for config in (weights_keras.KERAS_HUB_DEFAULT_CONVERTER, stretch):
        converter = keras_hub.layers.ResNetImageConverter(**config)
        spec = recipes.keras_hub(config).spec()
        size = config["image_size"][0]
        for photo in PHOTOS:
            ours = tfdata_pipeline.eval_image(tf.io.read_file(photo), size,
                                              recipes.parse(spec, size)).numpy()
            theirs = np.asarray(converter(np.asarray(keras.utils.load_img(photo), np.float32)[
                None]))[0]
            np.testing.assert_allclose(ours, theirs, atol=1e-4, err_msg=f"{spec} {photo}")


@pytest.mark.one_stack("pip", "main.py --mode predict and the export on imported weights are "
                        "the torchvision and timm tests' under both stacks; keras-hub's recipe "
                        "is compared with its converter under both (the test above)")
# `make test-slow` (the suite's time budget): keras-hub's import is
# test_a_keras_hub_preset_without_its_task_weights_imports_the_backbone_alone's.
@pytest.mark.slow
def test_keras_hub_preset_answers_as_keras_hub_on_photographs(keras_hub_preset, tmp_path):
    """A keras-hub preset, imported: its recipe (the preset's converter) recorded, and
    main.py --mode predict and the exported serving_default give keras-hub's own classifier's
    logits on three photographs."""
    preset, want = keras_hub_preset
    ckpt = tmp_path / "ckpt"
    assert pretrained.main([str(preset), str(ckpt), "--from", "keras_hub"]) == 0
    recorded = checkpoint_settings.read(str(ckpt))["settings"]["eval_preprocessing"]
    assert recorded.startswith("resize:aspect,crop:224,interpolation:bicubic,antialias:0,"
                               "mean:123.675/116.28/103.53,std:58.395/57.12/57.375"), recorded
    records, logits = predict_and_export(ckpt, tmp_path / "run")
    same_answer(logits, want)
    assert records[0]["top5_classes"] == [int(c) for c in np.argsort(-want[0])[:5]]


@pytest.mark.parametrize("fault, expected", [
    ("v2", "keras-hub's ResNet with use_pre_activation True is not ResNet-50 v1.5"),
    ("not a preset", "config.json: not a keras-hub ResNetBackbone preset (its class: none)"),
    ("padded", "keras-hub's image converter: pad_to_aspect_ratio: padding to the aspect is not "
               "reproduced (--recipe records another)")])
def test_a_keras_hub_preset_of_another_network_is_one_line(keras_hub_preset, tmp_path, capsys,
                                                           fault, expected):
    import shutil
    preset, _ = keras_hub_preset
    bad = tmp_path / "preset"
    if fault == "not a preset":
        bad.mkdir()
    else:
        shutil.copytree(preset, bad, ignore=shutil.ignore_patterns("*.h5"))
        name, edit = ("config.json", lambda c: c["config"].update(use_pre_activation=True)) \
            if fault == "v2" else ("preprocessor.json", lambda c: c["config"]["image_converter"][
                "config"].update(pad_to_aspect_ratio=True, crop_to_aspect_ratio=False))
        config = json.load(open(bad / name))
        edit(config)
        json.dump(config, open(bad / name, "w"))
    assert pretrained.main([str(bad), str(tmp_path / "out"), "--from", "keras_hub"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("import_weights.py: error: ") and expected in err, err
    assert len(err.splitlines()) == 1 and not os.path.exists(tmp_path / "out" / "checkpoint")


def test_a_keras_hub_preset_without_its_task_weights_imports_the_backbone_alone(
        keras_hub_preset, tmp_path, capsys):
    """task.json without task.weights.h5: keras-hub builds the classifier with a random head,
    which was imported as the source's (exit 0, no note). Now the backbone alone, the
    classifier fresh, said in one line; and a config.json whose "config" is a list is one line,
    not a traceback."""
    import shutil
    preset, _ = keras_hub_preset
    headless = tmp_path / "headless"
    shutil.copytree(preset, headless, ignore=shutil.ignore_patterns("task.weights.h5"))
    assert pretrained.main([str(headless), str(tmp_path / "out"), "--from", "keras_hub"]) == 0
    out = capsys.readouterr().out
    assert (f"note: {headless} has task.json but no task.weights.h5: the classifier's weights "
            "are not there, so the backbone alone is imported (the classifier starts fresh)"
            ) in out
    full = tmp_path / "full"
    assert pretrained.main([str(preset), str(full), "--from", "keras_hub"]) == 0
    capsys.readouterr()
    a = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path / "out")))
    b = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(full)))
    shapes = a.get_variable_to_shape_map()
    differ = [n for n in shapes if n in b.get_variable_to_shape_map() and "VARIABLE_VALUE" in n
              and shapes[n] and not np.array_equal(a.get_tensor(n), b.get_tensor(n))]
    # The trunk is the preset's; only the classifier (kernel and bias) is not.
    assert len(differ) == 2 and {tuple(shapes[n]) for n in differ} == {(2048, 1000), (1000,)}
    listed = tmp_path / "listed"
    shutil.copytree(preset, listed)
    config = json.load(open(listed / "config.json"))
    config["config"] = [config["config"]]
    json.dump(config, open(listed / "config.json", "w"))
    assert pretrained.main([str(listed), str(tmp_path / "out2"), "--from", "keras_hub"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"import_weights.py: error: {listed}/config.json: its \"config\" is a list, "
                   "not the backbone's settings (a JSON object): not a preset save_to_preset "
                   "wrote"]


# --- hardening: the importer's inputs and outputs ---------------------------------------------
def test_a_keras_classifier_of_its_own_classes_is_imported_with_them(tmp_path, capsys):
    """A keras.applications.ResNet50 trained for 10 classes (Keras 3's save_weights): its
    classifier is imported, not dropped as "no classes"."""
    app = keras.applications.ResNet50(weights=None, classes=10)
    path = str(tmp_path / "ten.weights.h5")
    app.save_weights(path)
    assert pretrained.main([path, str(tmp_path / "k"), "--from", "keras"]) == 0
    out = capsys.readouterr().out
    assert "(10 classes, --padding symmetric; evaluated with --eval_preprocessing " \
        "resize:squash," in out and "starts fresh" not in out
    model, settings, _ = imported("keras", path)
    assert settings["num_classes"] == 10
    np.testing.assert_array_equal(model.get_layer("logits").kernel.numpy(),
                                  app.get_layer("predictions").kernel.numpy())
