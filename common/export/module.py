"""What a model's export is: the base of each model's exports object, and the trained model as
one frozen value, the ``ExportModule``, which every writer takes.

A model's exports object (``Task.exports_class``: ``rn50/exports.py``, ``ssd/exports.py``,
``txl/exports.py``) declares what a client of its export calls and needs: its signatures,
assets and client information, and what it exports beside the SavedModel (``ExportSpec``).
Once the model exists, ``build`` makes one ``ExportModule`` of it (as TF Model Garden builds an
``ExportModule`` from a config and a model): the signatures and preprocessing traced once, the
assets, ``client.json``'s fields, the card's facts, the engine profile and the calibration
batches. ``common.export`` writes it (the SavedModel, its ONNX and INT8 forms, Triton model
repositories) the same way for every model, from that value and nothing of the run. Kept apart
from the Task, as TF Model Garden keeps ``official/vision/serving/`` apart from its tasks:
training does not need it, and what an export holds is decided in one place.

Every export holds, besides its signatures, ``assets/`` with the files a client reads (class
names, label map or vocabulary) and ``assets/client.json``: the signatures' inputs and outputs,
how to prepare an input, the precision it was trained in and the checkpoint's settings.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import tempfile
from collections.abc import Callable, Mapping

import keras
import tensorflow as tf

from common import graph, precision
from common.checkpoint.settings import settings_of, weights_source
from common.errors import DataError, UsageError, one_line
from common.export import card as cards

CLIENT_INFO = "client.json"  # in the SavedModel's assets/
# The image models' preprocessing alone, a SavedModel of its own (no weights) in the export:
# Triton's <name>_preprocess runs it, and a client that prepares images for the networks.
PREPROCESS = "preprocess"


@dataclasses.dataclass(frozen=True)
class ExportSpec:
    """What a model exports beside its SavedModel, declared once (as ``CheckpointSpec`` declares
    what a checkpoint is) and read by ``common.export``: its ONNX files, INT8, the names and
    batching of its Triton models, the state a sequence keeps, how TensorRT's engines are
    made. A model's exports class holds one as ``export``."""
    # What --export_onnx writes beside the SavedModel: file name -> the signature it converts
    # (one whose inputs are tensors TensorRT takes: not encoded images).
    onnx_files: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"model.onnx": "serving_default"})
    # Whether --export_triton needs model.onnx (the image models' networks in Triton: it then
    # implies --export_onnx).
    onnx_for_triton: bool = False
    # Whether --export_onnx_int8 calibrates this model's ONNX (on its training records' images,
    # ``ExportModule.calibration``).
    int8: bool = False
    # --export_triton: the models' names in the repository (``<triton_name>_savedmodel``, ...)
    # and the most requests Triton batches into one (where the model's tensors are batched).
    triton_name: str = "model"
    triton_max_batch_size: int = 64
    # A model whose signatures carry a state from call to call (state input, state output,
    # its batch axis): Triton serves it as a sequence that keeps the state in the server.
    triton_state: tuple[str, str, int] | None = None
    # The state that the ONNX model's GPU servers keep per sequence (Triton's implicit state on
    # the ONNX Runtime and TensorRT backends, ``triton/``): state input -> state output, each of
    # a fixed shape, zeros to start. Where ``triton_state``'s memory grows with the sequence
    # (the Python backend keeps it), this one is a tensor of one shape the server keeps.
    implicit_state: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # ONNX inputs that may be left out (a default of zeros of this shape in the graph, and
    # ``optional`` in Triton's config), except in TensorRT's engines, which take them all.
    onnx_defaults: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    # The ONNX file (of ``onnx_files``) that Triton's ``<name>_tensorrt`` engine is built from
    # (its INT8 form for ``<name>_tensorrt_int8``), without its inputs' defaults (TensorRT's
    # parser would take them for constants); ``tensorrt_rewrite``, where the engine needs the
    # graph changed first, names the function that does it by ``module:function``
    # (``function(source, out_path)``), imported only where the engines' graphs are written.
    tensorrt_onnx: str = "model.onnx"
    tensorrt_rewrite: str | None = None


class Exports:
    """A model's export, and what inference is for it: what each model declares (its class
    attributes; what it exports beside the SavedModel: ``export``, an ``ExportSpec``) and the
    hooks it overrides, at most eight methods (a test holds the count; the rest of the export is
    this module's functions and ``common.export``'s, which read the ``ExportModule`` that
    ``build`` makes of it). Subclasses give ``signatures`` and, where they have them,
    ``assets``, ``client_info``, ``predict_file`` and their engines' profile."""

    export: ExportSpec = ExportSpec()
    # The image models' evaluation preprocessing of one encoded image, (encoded, size) ->
    # float (size, size, 3): what their ``serving_default`` and Triton's ``<name>_preprocess``
    # run before the network (a ``staticmethod`` of the model's pipeline function).
    prepare_image = None
    # Inference (predict, the inference benchmark): the part of a data batch the model takes
    # (an index or a key; None: the whole batch), and whether the evaluation batches are
    # streams that carry a state from batch to batch (Transformer-XL's memory: served in
    # order, the short last ones dropped, not re-batched).
    inference_input: int | str | None = 0
    inference_streams: bool = False

    def __init__(self, task):
        self.task, self.flags = task, task.flags
        # The policy the weights were trained in, which client.json states.
        self.precision = task.ctx.precision

    # --- what the SavedModel holds ---------------------------------------------------------
    def signatures(self, model: keras.Model) -> dict:
        """The SavedModel's signatures by name (``serving_default`` first): ``tf.function``s
        with an input signature, over ``model``, each returning a dict of named outputs."""
        raise NotImplementedError

    def assets(self) -> dict[str, str]:
        """Files in the SavedModel's ``assets/`` by name -> text (class names, a vocabulary)."""
        return {}

    def client_info(self) -> dict:
        """This model's part of ``client.json``: how a client prepares an input and reads an
        output (input size, mean and standard deviation, the class names' file), and ``data``,
        what the weights were trained and scored on (``data_read``)."""
        return {}

    # --- what inference is: predict and the inference benchmark ---------------------------
    def infer(self, model: keras.Model, inputs, state=None):
        """(outputs, next state) of one inference batch, for the inference benchmark."""
        return model(inputs, training=False), state

    def predict_file(self, model: keras.Model, path: str) -> list[tuple[dict, str | None]]:
        """The prediction records of one ``--to_predict`` file, each with its readable line
        (None: the record's fields as they are; the log's JSON line keeps the record whole);
        a ``DataError`` when it cannot be read: the run reports it and goes on with the other
        files."""
        raise NotImplementedError(f"{self.task.name} has no predict mode")

    def serving_call(self, inputs, state) -> tuple[str, object]:
        """The signature that computes what ``Task.infer`` computes, and its arguments (a
        tensor when the signature takes one, else a dict by argument name): what the TF-TRT
        benchmark (--use_tftrt) times."""
        return "serving_default", inputs

    # --- TensorRT ---------------------------------------------------------------------------
    def engine_shapes(self) -> dict[str, tuple[list[int], list[int]]]:
        """The ONNX inputs whose dimensions past the batch's differ in a TensorRT optimisation
        profile from one row's to the most rows': name -> (the least, the most). Inputs not
        named: every dimension of unknown size is the batch's."""
        return {}


@dataclasses.dataclass(frozen=True)
class ExportModule:
    """The trained model as its exports hold it, made once by ``build`` after the model exists:
    what the writer, ONNX, INT8, Triton, TensorRT and TF-TRT take, and nothing of the run. The
    variables are the model's own: an export written after training holds the trained values
    of the functions traced before it (the trial export's)."""
    name: str  # the model's (``common.models``' key)
    spec: ExportSpec  # what it exports beside the SavedModel
    variables: tuple  # the model's variables, which the SavedModel keeps
    signatures: Mapping[str, tf.types.experimental.Function]  # traced once
    preprocess: tf.types.experimental.Function | None  # the image models' preprocessing alone
    assets: Mapping[str, str]  # assets/ by name -> text
    described: Mapping  # client.json without the model card (``_describe``)
    image_size: int | None  # the image models' input size
    # The model card's facts (``card.build``'s arguments) but what it scored and the weights'
    # hash, which the writer takes when it writes (the weights are trained by then).
    card: Mapping
    # ``Exports.engine_shapes``: the ONNX inputs' TensorRT profile past the batch dimension.
    engine_shapes: Mapping[str, tuple[list[int], list[int]]]
    log_dir: str | None  # where a failed tool's log is kept (--results_dir)
    # --export_onnx_int8's calibration: (images) -> batches (numpy) of that many of the ONNX
    # input from the training records, a bad record named in one line; how many it asks for.
    calibration: Callable | None = None
    calibration_images: int = 0
    # () -> this value over the model rebuilt in float32 with its weights (AMP), what ONNX and
    # TF-TRT convert; None where the model computes in float32.
    float32: Callable[[], ExportModule] | None = None


def build(exports: Exports, model: keras.Model) -> ExportModule:
    """The ``ExportModule`` of ``model``: ``exports``' declarations read and its signatures
    traced, once. A licence the flags give over the weights' source's is refused here, in one
    line."""
    from common.models import MODELS
    task, f = exports.task, exports.flags
    signatures, info = exports.signatures(model), exports.client_info()
    size = f.image_size if exports.prepare_image is not None else None
    weights, given = weights_source(task), f.weights_license
    if given and weights.get("license") and weights["license"].lower() != given.lower():
        raise UsageError(f"--weights_license {given}: these weights are under their source's "
                         f"licence ({weights['license']}); leave the flag out")
    card = {"model": task.name, "pipeline_tag": MODELS[task.name].pipeline_tag,
            "data": data_read(info, f.data_dir),
            "weights": {**weights, "license": given} if given else weights,
            "recipe": info.get("recipe"), "parameter_count": model.count_params(),
            "triton_model": exports.export.triton_name}
    value = ExportModule(
        name=task.name, spec=exports.export, variables=tuple(model.variables),
        signatures=signatures, preprocess=preprocess_function(exports.prepare_image, size),
        assets=exports.assets(), image_size=size, card=card,
        described=_describe(exports, signatures, info, settings_of(task)),
        engine_shapes=exports.engine_shapes(), log_dir=f.results_dir,
        calibration=_calibration(exports) if exports.export.int8 else None,
        calibration_images=f.calibration_images)
    if model.dtype_policy.name == "float32":
        return value

    def in_float32() -> ExportModule:
        copy = precision.float32_model(task.build_model, model)
        return dataclasses.replace(value, variables=tuple(copy.variables),
                                   signatures=exports.signatures(copy), float32=None)
    return dataclasses.replace(value, float32=in_float32)


def _calibration(exports: Exports):
    """(images) -> the calibration batches of an INT8 export (``calibration_batches``):
    the ONNX input part (``inference_input``) of the training records' batches through the
    model's tf.data pipeline as evaluation prepares them, all of the records (whatever this
    process's share); None without records."""
    records = exports.task.records
    if records is None or records.data_dir is None:
        return None
    part = exports.inference_input

    def dataset():
        return graph.dataset_map(records.tfdata(records.files("train"), False, whole=True),
                                 lambda *b: (b if len(b) > 1 else b[0])[part])
    return functools.partial(calibration_batches, dataset,
                             locate=functools.partial(records.locate_bad_record, "train"))


def calibration_batches(dataset, images: int, locate):
    """``images`` images of ``dataset()`` (batches of the ONNX input), as numpy batches. A
    record that cannot be read stops with one line naming its file and number (``locate()``:
    the first bad record, or None)."""
    left = images
    try:
        for batch in dataset():
            if left <= 0:
                return
            batch = batch.numpy()[:left]
            left -= len(batch)
            yield batch
    except tf.errors.OpError as e:
        where = locate() or one_line(e.message)
        raise DataError(f"--export_onnx_int8: a calibration image cannot be read ({where})"
                        ) from None


def preprocess_function(prepare, size: int | None):
    """The image models' preprocessing alone, encoded images (N,) string -> ``images``
    (N, size, size, 3) float32 and ``valid`` (N,) bool (``prepare_each`` of ``prepare``), as
    a ``tf.function``: Triton's ``<name>_preprocess`` runs it before the ONNX network. None
    for a model whose input is no image (``prepare`` None)."""
    if prepare is None:
        return None

    @graph.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")])
    def preprocess(images):
        batch, valid = prepare_each(images, prepare, size)
        return {"images": batch, "valid": valid}
    return preprocess


def _describe(exports: Exports, signatures: Mapping, info: Mapping, settings: Mapping) -> dict:
    """``client.json`` but its model card: each signature's inputs and outputs (dtype, shape;
    -1 where any size goes), the model's own fields (``info``), the precision it was trained
    in and its checkpoint's ``settings``."""
    def spec(t):
        return {"dtype": t.dtype.name, "shape": [-1 if d is None else int(d)
                                                 for d in t.shape]}
    described = {}
    for name, fn in signatures.items():
        concrete = fn.get_concrete_function()
        described[name] = {
            "inputs": {s.name: spec(s) for s in fn.input_signature},
            "outputs": {k: spec(v) for k, v in concrete.structured_outputs.items()}}
    p, spec = exports.precision, exports.export
    pre = {"preprocess": PREPROCESS} if exports.prepare_image is not None else {}
    if spec.triton_state:  # the repositories' model that keeps the state in the server
        pre["sequence_model"] = spec.triton_name
        # The state a signature carries from one call to the next (common.api's sequences).
        pre["state"] = dict(zip(("input", "output", "batch_axis"), spec.triton_state))
    return {"model": exports.task.name, "signatures": described, **info, **pre,
            # The model a client of the Triton repositories calls (the ensemble, the sequence),
            # and the SavedModel's own (tensorflow/; what pytriton_server.py serves).
            "triton_model": spec.triton_name,
            "savedmodel_model": f"{spec.triton_name}_savedmodel",
            "trained_precision": p.policy, "exported_weights": "float32"
            if not p.amp else f"float32 (computed in {p.compute_dtype})",
            "checkpoint_settings": dict(settings)}


def data_read(info: Mapping, data_dir: str | None) -> dict:
    """The data the model card says these weights were trained and scored on, from the files
    the run read: ``dataset``, the model table's Hub id only when they are that set (each model
    tells by its prepared files, its ``client_info``'s ``data``: a tiny model trained on digits
    is no ImageNet model), else None; ``description``, what the data is (no path of this
    machine)."""
    found = info.get("data")
    if found:
        return found
    if not data_dir:
        return {"dataset": None, "description": "synthetic data"}
    return {"dataset": None, "description": "the prepared data of --data_dir"}


def model_card(module: ExportModule, scored: dict | None) -> dict:
    """The export's model card (``common/export/card.py``): the weights' source as their
    checkpoint recorded it, the evaluation recipe, what they scored (``scored``: the exporting
    run's evaluation, or one recorded for this step), the network's size and the packages, and
    the hash of the weights' values now."""
    return cards.build(**module.card, scored=scored,
                       exported_weights_sha256=cards.weights_sha256(module.variables))


def save(module: ExportModule, export_dir: str, model_card: dict | None = None) -> None:
    """The SavedModel of ``module`` in ``export_dir``: its signatures, and its assets with
    ``client.json`` in its ``assets/``; an image model's preprocessing alone beside them
    (``preprocess/``, the same function as ``serving_default``'s); with ``model_card``, the
    card beside them (``README.md``, ``model_card.json``)."""
    saved = tf.Module()
    # The variables, not the Keras model: tracking the model would have the SavedModel
    # trace its own call, which not every model's call can be (memories, targets).
    saved.weights = [v.value for v in module.variables]
    saved.functions = dict(module.signatures)
    texts = {**module.assets, CLIENT_INFO: json.dumps(
        {**module.described, "model_card": model_card}, indent=1) + "\n"}
    with tempfile.TemporaryDirectory() as tmp:
        saved.assets = []
        for name, text in texts.items():
            path = os.path.join(tmp, name)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            saved.assets.append(tf.saved_model.Asset(path))
        tf.saved_model.save(saved, export_dir, signatures=dict(module.signatures))
    if module.preprocess is not None:
        alone = tf.Module()
        alone.preprocess = module.preprocess
        tf.saved_model.save(alone, os.path.join(export_dir, PREPROCESS),
                            signatures={"serving_default": module.preprocess})
    if model_card is not None:
        cards.write(export_dir, model_card)


def record_served_files(export_dir: str, onnx_files) -> None:
    """The card's ``served_files`` (``card.served_files``) once every file of the export in
    ``export_dir`` is written, in ``model_card.json``, ``README.md`` and ``client.json``."""
    card = cards.read(export_dir)
    if card is None:
        return
    card["served_files"] = cards.served_files(export_dir, onnx_files)
    cards.write(export_dir, card)
    path = os.path.join(export_dir, "assets", CLIENT_INFO)
    with open(path, encoding="utf-8") as fh:
        info = json.load(fh)
    info["model_card"] = card
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(info, indent=1) + "\n")


def prepare_each(images, prepare, size: int):
    """Encoded images (N,) string -> (the float (N, size, size, 3) batch the network takes,
    ``valid`` (N,) bool), each prepared by ``prepare(encoded, size)`` (the model's evaluation
    preprocessing): the image models' ``serving_default`` before their network. An image that
    cannot be decoded fails alone: its row is zeros and ``valid`` False, and the batch's other
    images are answered (Triton batches requests from different clients into one call). In the
    graph, a dataset over the images whose failed elements are dropped (``ignore_errors``), each
    kept one scattered back to its row. The images decode in parallel, so that one preprocessing
    instance uses the host's cores (Triton's ``<name>_preprocess`` feeds a GPU network)."""
    n = tf.shape(images)[0]
    # The images of a batch decode side by side on the host's cores, in their order.
    ds = graph.dataset_map(tf.data.Dataset.from_tensor_slices((tf.range(n), images)),
                           lambda i, e: (i, prepare(e, size)),
                           num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).ignore_errors()

    def keep(found, item):  # the images decoded, in order, with their rows
        (rows, prepared), (i, x) = found, item
        k = rows.size()
        return rows.write(k, i), prepared.write(k, x)
    rows, prepared = ds.reduce(
        (tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[]),
         tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[size, size, 3])),
        keep)
    kept = rows.stack()[:, None]
    batch = tf.scatter_nd(kept, prepared.stack(), tf.stack([n, size, size, 3]))
    valid = tf.scatter_nd(kept, tf.ones_like(kept[:, 0], tf.bool), tf.expand_dims(n, 0))
    return batch, valid


def read_client_info(export_dir: str) -> dict:
    """An export's ``client.json``."""
    with open(os.path.join(export_dir, "assets", CLIENT_INFO), encoding="utf-8") as fh:
        return json.load(fh)


def float32_saved_model(module: ExportModule, directory: str) -> str:
    """A SavedModel of ``module`` in float32 in ``directory`` (``ExportModule.float32``: under
    AMP the model rebuilt in float32 with its weights): what ONNX and TF-TRT convert, so that
    the graph holds no casts and TensorRT picks the engine's precision (``trtexec --fp16``)."""
    save(module.float32() if module.float32 is not None else module, directory)
    return directory
