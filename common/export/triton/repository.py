"""``--export_triton DIR``: Triton Inference Server model repositories of the export, one per
kind of server, each complete and each loaded whole by its server under Triton's default flags
(``--exit-on-error=true``, strict readiness): every model of a repository has the backend and
the Python packages it needs on its server, so ``/v2/health/ready`` answers 200 once they are
loaded.

* ``DIR/cpu``: any ``tritonserver`` with the Python backend, the one ``nvidia-pytriton`` ships
  included (serving/tritonserver.py; a CPU is enough). For a network ``<name>``
  (``ExportSpec.triton_name``), an image model holds ``<name>`` (an ensemble: encoded images
  through ``<name>_preprocess`` into ``<name>_python``), ``<name>_preprocess`` (the export's
  own TensorFlow preprocessing, ``preprocess/``: the ensemble answers what the SavedModel
  answers to the last bit, where DALI's or Pillow's resize is not ``tf.image``'s) and
  ``<name>_python`` (``model.onnx`` run by ONNX Runtime); Transformer-XL holds ``<name>``, its
  SavedModel served as a sequence (``python_backend/sequence.py``: the memory stays in the
  server, a request carries its tokens only).
* ``DIR/triton``: NVIDIA's Triton container of ``tensorrt.NGC_RELEASE``, as
  ``docker/Dockerfile.triton`` builds it (its Python holding docker/triton-requirements.txt):
  the image models' ``<name>`` over ``<name>_onnx`` (the ONNX Runtime backend; after
  ``build_engines.sh``, TensorRT) with the same ``<name>_preprocess``; Transformer-XL's
  ``model.onnx`` on ONNX Runtime on the GPU, a sequence whose memory Triton keeps as implicit
  state (``tensorrt.stateful_config``; then ``<name>_tensorrt`` alike).
* ``DIR/tensorflow``: ``<name>_savedmodel``, the SavedModel's ``serving_default`` on the
  TensorFlow backend, which NVIDIA's containers have up to 25.02: served beside ``DIR/triton``
  (``--model-repository`` twice). Transformer-XL's takes and returns its memory.

Image ensembles also return ``valid``: False for an image that could not be decoded, whose
other outputs are the network's answer on zeros. The image models need ``--export_onnx``'s
``model.onnx`` (``--export_triton`` writes it).

TensorRT engines are built on the GPU that serves them, so ``<name>_tensorrt`` (FP16, from
``model.onnx``; SSD320's from the EfficientNMS graph) and ``<name>_tensorrt_int8`` (from
``model_int8.onnx``) wait beside the repositories in ``DIR.tensorrt/``, with
``build_engines.sh``, which builds them with ``trtexec`` and moves each complete model into
``DIR/triton`` (then points ``<name>`` at the FP16 engine). Nothing there is in a repository
before its plan exists: Triton refuses to start with a model that has no version.

The export's model card (``README.md``, ``model_card.json``) is in the folder of the model a
client calls in each repository (``<name>``; ``<name>_savedmodel`` in ``DIR/tensorflow``),
naming that model (``triton_model``) and the SHA-256 of each file that repository's models
serve (``served_files``; ``build_engines.sh`` adds the engines' when it installs them).

Inputs and outputs are named as the model names them (``client.json``'s signatures, the ONNX
files' graphs); the configs are ``config``'s. ResNet-50's ``probabilities`` carry
``label_filename`` (Triton's classification extension answers names); the networks and the
preprocessing are warmed up at load. Writing into repositories that hold these models already
adds a version (``version_policy``: the newest served, the ``KEPT_VERSIONS - 1`` before it kept
on disk to roll back to, older ones removed: each holds a whole export's files), or with
``--triton_replace`` replaces them; other models there are kept.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import tempfile

from common import files
from common.export import card as cards
from common.export import module as export_module
from common.export.triton import tensorrt
from common.export.triton.config import (
    BATCH_MEMORY,
    batched,
    config,
    ensemble,
    max_sequences,
    onnx_tensors,
    sequence,
    to_text,
    warmup,
    write_text,
)

PYTHON_MODELS = os.path.join(os.path.dirname(__file__), "python_backend")
# The repositories, by the server that loads each whole (module docstring).
TARGETS = {
    "cpu": "for any tritonserver with the Python backend (PyTriton's: serving/tritonserver.py)",
    "triton": "for NVIDIA's Triton container built by docker/Dockerfile.triton",
    "tensorflow": "beside triton/ where the container has the TensorFlow backend (25.02 and "
                  "earlier)",
}
# The triton/ repository is for a GPU host: its networks (``<name>_onnx``, the TensorRT
# engines) run on each GPU (``KIND_AUTO``, one instance a GPU; dynamic batching fills a batch
# from what queued), and its TensorFlow preprocessing on the host. One preprocessing instance
# decodes a batch's images side by side on every core (``module.prepare_each``); two let a
# batch be prepared while the previous one is handed to the network. cpu/ keeps one: on a
# CPU host a second only splits the cores the network needs (config.QUEUE_DELAY_US).
GPU_HOST_PREPROCESS_INSTANCES = 2


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """How one repository serves a model past its SavedModel: the image models' network (its
    model's name suffix and kind) behind a preprocessing of so many instances, on the CPU or on
    each GPU. On a GPU, a model with a state runs the export's ONNX with the state Triton keeps;
    on the CPU, the Python backend's sequence over the SavedModel."""
    repository: str
    network: str
    kind: dict
    cpu: bool
    preprocess_instances: int


# The repositories that hold a pipeline, in the order they are written (tensorflow/ holds the
# SavedModel alone).
PIPELINES = (
    Pipeline("cpu", "_python", {"backend": "python"}, cpu=True, preprocess_instances=1),
    Pipeline("triton", "_onnx", {"platform": "onnxruntime_onnx"}, cpu=False,
             preprocess_instances=GPU_HOST_PREPROCESS_INSTANCES),
)
# Versions of a model a repository keeps, the new one included (docs/deployment.md).
KEPT_VERSIONS = 3
# What a repository held before the repositories per server (one flat directory): a new
# export replaces these too.
FLAT = ("", "_cpu", "_savedmodel", "_onnx", "_preprocess", "_python", "_tensorrt",
        "_tensorrt_int8")


def _saved_model_tensors(export_dir: str, signature: str = "serving_default"):
    """(inputs, outputs) of a SavedModel signature as its ``client.json`` describes them:
    name -> (dtype name, shape, None = any)."""
    described = export_module.read_client_info(export_dir)["signatures"][signature]

    def read(tensors):
        return {k: (v["dtype"], [None if d == -1 else d for d in v["shape"]])
                for k, v in tensors.items()}
    return read(described["inputs"]), read(described["outputs"])


class _Repository:
    """One target's models being written into the staged repository, each with its next
    version; the existing repository's other models (not this network's) carried over."""

    def __init__(self, stage: str, existing: str, replace: bool, own: set[str]):
        self.stage, self.existing, self.replace = stage, existing, replace
        self.written: list[str] = []
        self.served: dict[str, str] = {}  # model/version/file -> its SHA-256, for the card
        os.makedirs(stage)
        if os.path.isdir(existing):
            for entry in sorted(os.listdir(existing)):
                if entry not in own:
                    src, dst = os.path.join(existing, entry), os.path.join(stage, entry)
                    if os.path.isdir(src) and not os.path.islink(src):
                        shutil.copytree(src, dst, symlinks=True,
                                        copy_function=files.link_or_copy)
                    else:
                        files.link_or_copy(src, dst)

    def add(self, c: dict, extra: dict[str, str] | None = None) -> str:
        """Model ``c["name"]``: its config, the files ``extra`` names (path in the model's
        folder -> source file or directory), and the earlier versions (unless replacing);
        returns its new version's folder."""
        name = c["name"]
        model = os.path.join(self.stage, name)
        old = os.path.join(self.existing, name)
        versions = sorted(int(v) for v in os.listdir(old) if v.isdigit()) \
            if os.path.isdir(old) and not self.replace else []
        os.makedirs(model)
        # Hard links: a version carried over costs no new space, but each holds the files of
        # its own export; the newest few are kept (every export added one, for ever).
        for v in versions[-(KEPT_VERSIONS - 1):]:
            _link_tree(os.path.join(old, str(v)), os.path.join(model, str(v)))
        version = os.path.join(model, str(versions[-1] + 1 if versions else 1))
        os.makedirs(version)
        for rel, src in (extra or {}).items():
            dst = os.path.join(model, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if os.path.isdir(src):
                _link_tree(src, dst)
            else:
                files.link_or_copy(src, dst)
        write_text(os.path.join(model, "config.pbtxt"), to_text(c))
        self.written.append(name)
        return version

    def serves(self, version: str, file: str, sha256: str | None) -> None:
        """The card's record of a file the new ``version`` of a model serves."""
        if sha256:
            self.served[os.path.relpath(os.path.join(version, file), self.stage)] = sha256


def _link_tree(src: str, dst: str, ignore=None) -> None:
    shutil.copytree(src, dst, ignore=ignore, copy_function=files.link_or_copy)


def model_names(spec) -> set[str]:
    """Every model an export of a model of ``spec`` (an ``ExportSpec``) may write in one of its
    repositories, and the TensorRT ones ``build_engines.sh`` adds: a new export drops those
    (their engines are of the earlier weights; the script builds them anew)."""
    n = spec.triton_name
    return {f"{n}{s}" for s in FLAT}


def names(spec) -> set[str]:
    """The entries of ``DIR`` an export replaces: the repositories, and the models of a flat
    repository an earlier version of this code wrote."""
    return set(TARGETS) | model_names(spec)


def write_repository(module, export_dir: str, triton_dir: str, replace: bool = False,
                     log=None) -> list[str]:
    """The model repositories of the export in ``export_dir`` under ``triton_dir`` (and the
    TensorRT models that wait for their engines in ``triton_dir.tensorrt``), written beside
    and swapped in whole; the lines that say what was written and how to serve it."""
    name, batch = module.spec.triton_name, module.spec.triton_max_batch_size
    info = export_module.read_client_info(export_dir)
    labels_file = os.path.join(export_dir, "assets", info.get("labels") or "-")
    labels = {"probabilities": "labels.txt"} if os.path.isfile(labels_file) else None
    label_files = {"labels.txt": labels_file} if labels else {}
    onnx_path = os.path.join(export_dir, "model.onnx")
    net = onnx_tensors(onnx_path) if os.path.exists(onnx_path) else None
    preprocess = os.path.join(export_dir, export_module.PREPROCESS)
    image = os.path.isdir(preprocess)
    # The export's model card, beside the model a client calls in each repository, naming that
    # model and the files the repository serves (``_Repository.served``).
    card = cards.read(export_dir)
    exported = (card or {}).get("served_files", {})
    if image and not net:
        raise ValueError(f"{export_dir} has no model.onnx: the image models' repositories "
                         "run it (--export_onnx)")
    notes: list[str] = []
    with files.staged_dir(triton_dir, "the Triton model repositories",
                          replaces=names(module.spec), log=log) as stage:
        repos = {t: _Repository(os.path.join(stage, t), os.path.join(triton_dir, t), replace,
                                model_names(module.spec)) for t in TARGETS}
        with tempfile.TemporaryDirectory(dir=stage) as tmp:
            inputs, outputs = _saved_model_tensors(export_dir)
            warm = {}
            if "string" in {d for d, _ in inputs.values()}:
                warm = {"warmup/images": _warmup_image(tmp, module.image_size)}
            version = repos["tensorflow"].add(config(
                f"{name}_savedmodel", {"platform": "tensorflow_savedmodel"}, inputs, outputs,
                batch, labels=labels, warmup=warmup(inputs, batched(inputs, outputs),
                                                    "images")), {**label_files, **warm})
            _link_saved_model(export_dir, version)
            repos["tensorflow"].serves(version, "model.savedmodel", exported.get("saved_model"))
            calls = {"tensorflow": f"{name}_savedmodel"}
            if image:
                pre = _image_models(repos, module, net, preprocess, labels, label_files, warm,
                                    exported)
                for p in PIPELINES:
                    repos[p.repository].add(ensemble(name, f"{name}_preprocess", pre,
                                                     name + p.network, net, batch, labels),
                                            label_files)
                    calls[p.repository] = name
            elif module.spec.triton_state:
                python_sequence = _sequence_config(module.spec, export_dir)
                for p in PIPELINES:
                    repo = repos[p.repository]
                    if not p.cpu and module.spec.implicit_state and net:
                        # its ONNX, the state the server's
                        version = repo.add(tensorrt.stateful_config(
                            module.spec, info, name, p.kind, net,
                            optional=tuple(module.spec.onnx_defaults)))
                        files.link_or_copy(onnx_path, os.path.join(version, "model.onnx"))
                        repo.serves(version, "model.onnx", exported.get("model.onnx"))
                    else:
                        _add_python_sequence(repo, python_sequence, export_dir, exported)
                        if not p.cpu:  # no model.onnx: the CPU's model, and said
                            cpu = next(q.repository for q in PIPELINES if q.cpu)
                            notes.append(f"note: {p.repository}/{name} is {cpu}/'s model, run "
                                         "on the CPU: the export has no model.onnx, which "
                                         f"{p.repository}/ runs on the GPU (--export_onnx "
                                         "writes it)")
                    calls[p.repository] = name
            if card is not None:
                for target, model in calls.items():
                    cards.write(os.path.join(repos[target].stage, model), {
                        **card, "triton_model": model, "served_files": repos[target].served})
        written = {t: r.written for t, r in repos.items()}
    lines = [f"wrote Triton model repositories to {triton_dir}: " + "; ".join(
        f"{t}/ ({', '.join(m)}) {TARGETS[t]}" for t, m in written.items() if m)] + notes
    if net:
        lines += tensorrt.write(module, export_dir, triton_dir, labels_file if labels else None,
                                image, log, info)
    return lines


def _add_python_sequence(repo: _Repository, c: dict, export_dir: str, exported: dict
                         ) -> None:
    """The sequence model on the Python backend (``python_backend/sequence.py`` over the
    export's SavedModel, config ``c``) into ``repo``, recorded for its card."""
    version = repo.add(c)
    _link_saved_model(export_dir, version)
    repo.serves(version, "model.savedmodel", exported.get("saved_model"))
    _python_model(version, "sequence.py")


def _python_model(version: str, source: str) -> None:
    """``python_backend/<source>`` as ``version/model.py``, beside an empty *file* named
    ``__pycache__``: Python can then write no byte code into the version folder when Triton's
    Python backend imports the model (a new ``__pycache__/`` there made Triton's poll mode
    reload the model a second after it loaded, dropping every open sequence)."""
    shutil.copy2(os.path.join(PYTHON_MODELS, source), os.path.join(version, "model.py"))
    with open(os.path.join(version, "__pycache__"), "w"):
        pass


def _link_saved_model(export_dir: str, version: str) -> None:
    """The export's SavedModel (its ONNX files and preprocessing left out) as
    ``version/model.savedmodel``, by hard links."""
    _link_tree(export_dir, os.path.join(version, "model.savedmodel"),
               ignore=shutil.ignore_patterns("*.onnx", export_module.PREPROCESS))


def _image_models(repos, module, net, preprocess: str, labels, label_files, warm, exported):
    """``<name>_preprocess`` in ``cpu`` and ``triton``, ``<name>_python`` in ``cpu``,
    ``<name>_onnx`` in ``triton``; returns the preprocessing's (inputs, outputs)."""
    name, batch, size = module.spec.triton_name, module.spec.triton_max_batch_size, \
        module.image_size
    inputs = {"images": ("string", [None])}
    outputs = {"images": ("float32", [None, size, size, 3]), "valid": ("bool", [None])}
    net_batched = batched(*net)
    onnx_path = os.path.join(os.path.dirname(preprocess), "model.onnx")
    for p in PIPELINES:
        repo = repos[p.repository]
        version = repo.add(config(
            f"{name}_preprocess", {"backend": "python"}, inputs, outputs, batch,
            reshape=False, cpu=True, warmup=warmup(inputs, True, "images"),
            count=p.preprocess_instances), warm)
        _link_tree(preprocess, os.path.join(version, "model.savedmodel"))
        repo.serves(version, "model.savedmodel", exported.get("preprocess"))
        _python_model(version, "preprocess.py")
        version = repo.add(config(
            name + p.network, p.kind, *net, batch, reshape=not p.cpu, labels=labels, cpu=p.cpu,
            warmup=warmup(net[0], net_batched)), label_files)
        files.link_or_copy(onnx_path, os.path.join(version, "model.onnx"))
        repo.serves(version, "model.onnx", exported.get("model.onnx"))
        if p.kind.get("backend") == "python":  # ONNX Runtime on the CPU, in Python
            _python_model(version, "onnxruntime_cpu.py")
    return inputs, outputs


def _sequence_config(spec, export_dir: str) -> dict:
    """Transformer-XL's sequence model: the inputs and outputs of its signatures that carry
    the state, the state aside."""
    state_in, state_out, axis = spec.triton_state
    described = export_module.read_client_info(export_dir)
    info = described["signatures"]
    inputs, outputs, each = {}, {}, []
    for signature in info:
        i, o = _saved_model_tensors(export_dir, signature)
        if state_in in i:
            i.pop(state_in)
            o.pop(state_out)
            inputs.update(i)
            outputs.update(o)
            each.append(set(i))
    optional = set(inputs) - set.intersection(*each)
    c = sequence(spec.triton_name, inputs, outputs, (state_in, state_out), optional,
                 spec.triton_max_batch_size,
                 {**{k: described.get(k) for k in ("vocab_size", "vocab_sha256", "max_segment")},
                  "max_sequences": max_sequences(described.get("state_bytes")),
                  **({"row_bytes_per_pair": described["row_bytes"]["score_pair"],
                      "row_bytes_per_token": described["row_bytes"]["token"],
                      "batch_memory": BATCH_MEMORY} if described.get("row_bytes") else {})})
    c["parameters"].append({"key": "state_batch_axis", "value": {"string_value": str(axis)}})
    return c


def _warmup_image(tmp: str, size: int) -> str:
    """A grey JPEG of the input's size as Triton's warm-up reads a string: its length (4 bytes,
    little-endian), then its bytes."""
    import tensorflow as tf
    jpeg = tf.io.encode_jpeg(tf.fill([size, size, 3], tf.constant(128, tf.uint8))).numpy()
    path = os.path.join(tmp, "warmup-images")
    with open(path, "wb") as fh:
        fh.write(struct.pack("<I", len(jpeg)) + jpeg)
    return path
