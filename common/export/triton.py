"""``--export_triton DIR``: a Triton Inference Server model repository of the export, every
model in it complete, so that a server started on ``DIR`` as written loads what its backends
can serve.

For a network ``<name>`` (``Serving.triton_name``):

* ``<name>_savedmodel`` (``tensorflow_savedmodel``): the SavedModel's ``serving_default``
  (image models: encoded images in);
* ``<name>_onnx`` (``onnxruntime_onnx``): ``model.onnx``, when ``--export_onnx`` wrote it;
* image models also ``<name>_preprocess`` (Python backend): encoded images in, the network's
  float input out, by the export's own TensorFlow preprocessing (``triton_python/
  preprocess.py``: the SavedModel's answer to the last bit, where DALI's or Pillow's resize is
  not ``tf.image``'s), and with ONNX the ensembles that take encoded images under the model's
  plain name: ``<name>`` (preprocessing, then ``<name>_onnx``) and ``<name>_cpu``
  (preprocessing, then ``<name>_python``: the same ONNX file run by ONNX Runtime on the Python
  backend, for a server with no ONNX Runtime backend, such as the one ``nvidia-pytriton``
  ships). Each image ensemble also returns ``valid``: False for an image that could not be
  decoded, whose other outputs are the network's answer on zeros.

TensorRT engines are built on the GPU that serves them, so ``<name>_tensorrt`` (FP16, from
``model.onnx``; SSD320's from the EfficientNMS graph) and ``<name>_tensorrt_int8`` (from
``model_int8.onnx``) wait beside the repository in ``DIR.tensorrt/``, with
``build_engines.sh``, which builds them with ``trtexec`` and moves each complete model into the
repository (then points ``<name>`` at the FP16 engine). Nothing there is in the repository
before its plan exists: Triton refuses to start with a model that has no version.

Inputs and outputs are named as the model names them (``client.json``'s signatures, the ONNX
files' graphs). Where every tensor leads with the batch, Triton batches requests
(``max_batch_size``, ``dynamic_batching``); a value per row is declared ``[1]`` (``reshape``
to the model's ``[]``). Transformer-XL's memory leads with the layers: served unbatched, full
shapes. ResNet-50's ``probabilities`` carry ``label_filename`` (Triton's classification
extension answers names); the networks and the preprocessing are warmed up at load. Writing
into a repository that holds these models already adds a version (``version_policy``: the
newest served, the earlier kept on disk to roll back to), or with ``--triton_replace`` replaces
them.

The configs are Triton's ``ModelConfig`` messages, built here as dictionaries with the proto's
field names and printed in protobuf's text format (``to_text``); tritonclient's generated
``model_config_pb2`` needs protobuf 5 or later where NGC 25.02's TensorFlow has 4, so the tests
parse every file with that proto in scripts/triton_env.sh's environment and have a real
``tritonserver`` load them.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile

from common import files
from common.export import serving as serving_lib

DATA_TYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "int32": "TYPE_INT32",
              "int64": "TYPE_INT64", "string": "TYPE_STRING", "uint8": "TYPE_UINT8",
              "bool": "TYPE_BOOL"}
ONNX_TYPES = {1: "float32", 10: "float16", 6: "int32", 7: "int64", 2: "uint8", 9: "bool",
              8: "string"}
PYTHON_MODELS = os.path.join(os.path.dirname(__file__), "triton_python")


class Enum(str):
    """A protobuf enum value (printed bare, not quoted)."""


def to_text(message: dict, indent: int = 0) -> str:
    """``message`` (field name -> value: str, Enum, bool, int, float, dict for a message, list
    for a repeated field; a map as a list of ``{"key", "value"}`` entries) in protobuf's text
    format."""
    pad = "  " * indent
    lines = []
    for field, value in message.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{field} {{\n{to_text(value, indent + 1)}{pad}}}")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            items = ",\n".join(f"{pad}  {{\n{to_text(v, indent + 2)}{pad}  }}" for v in value)
            lines.append(f"{pad}{field} [\n{items}\n{pad}]")
        elif isinstance(value, list):
            lines.append(f"{pad}{field}: [ {', '.join(_scalar(v) for v in value)} ]")
        else:
            lines.append(f"{pad}{field}: {_scalar(value)}")
    return "".join(line + "\n" for line in lines)


def _scalar(value) -> str:
    if isinstance(value, Enum):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # ASCII with C escapes: what the text format reads
    return str(value)


def _saved_model_tensors(export_dir: str, signature: str = "serving_default"):
    """(inputs, outputs) of a SavedModel signature as its ``client.json`` describes them:
    name -> (dtype name, shape, None = any)."""
    described = serving_lib.read_client_info(export_dir)["signatures"][signature]

    def read(tensors):
        return {k: (v["dtype"], [None if d == -1 else d for d in v["shape"]])
                for k, v in tensors.items()}
    return read(described["inputs"]), read(described["outputs"])


def _onnx_tensors(path: str):
    """(inputs, outputs) of an ONNX file, as ``_saved_model_tensors`` gives them."""
    import onnx
    graph = onnx.load(path, load_external_data=False).graph

    def read(values):
        out = {}
        for v in values:
            t = v.type.tensor_type
            out[v.name] = (ONNX_TYPES[t.elem_type],
                           [d.dim_value if d.HasField("dim_value") else None
                            for d in t.shape.dim])
        return out
    return read(graph.input), read(graph.output)


def _batched(inputs, outputs) -> bool:
    """Whether every tensor leads with the batch (any size): Triton can then batch requests."""
    return all(shape and shape[0] is None for _, shape in [*inputs.values(), *outputs.values()])


def _tensors(tensors, batched: bool, reshape: bool = True, labels: dict | None = None):
    """ModelInput/ModelOutput entries, sorted by name. A value per row is ``dims: [1]``
    (Triton's dims cannot be empty), ``reshape``d to the model's ``[]`` where the backend
    reads the config's reshape (not the Python backend's models, which give ``[rows, 1]``)."""
    out = []
    for name, (dtype, shape) in sorted(tensors.items()):
        dims = shape[1:] if batched else shape
        entry = {"name": name, "data_type": Enum(DATA_TYPES[dtype])}
        if batched and not dims:
            entry["dims"] = [1]
            if reshape:
                entry["reshape"] = {"shape": []}
        else:
            entry["dims"] = [-1 if d is None else d for d in dims]
        if labels and name in labels:
            entry["label_filename"] = labels[name]
        out.append(entry)
    return out


def config(name: str, kind: dict, inputs, outputs, max_batch_size: int, *, reshape=True,
           labels=None, cpu=False, warmup=None) -> dict:
    """A model's ``ModelConfig``: ``kind`` its ``platform`` or ``backend``."""
    batched = _batched(inputs, outputs)
    c = {"name": name, **kind, "version_policy": {"latest": {"num_versions": 1}},
         "max_batch_size": max_batch_size if batched else 0,
         "input": _tensors(inputs, batched, reshape),
         "output": _tensors(outputs, batched, reshape, labels)}
    if kind.get("platform") != "ensemble":
        c["instance_group"] = [{"kind": Enum("KIND_CPU" if cpu else "KIND_AUTO")}]
        if batched:
            c["dynamic_batching"] = {}
    if warmup:
        c["model_warmup"] = [warmup]
    return c


def _warmup(inputs, batched: bool, data_file: str | None = None) -> dict:
    """One warm-up request of one row: random values, zeros for an integer input (token ids:
    random ones would fall outside the vocabulary, and the model would fail to load), or
    ``data_file`` (in ``warmup/``) for a string input."""
    entries = []
    for name, (dtype, shape) in sorted(inputs.items()):
        dims = (shape[1:] if batched else shape) or [1]
        value = {"data_type": Enum(DATA_TYPES[dtype]),
                 "dims": [1 if d is None else d for d in dims]}
        if dtype == "string":
            value["input_data_file"] = data_file
        elif dtype.startswith("int"):
            value["zero_data"] = True
        else:
            value["random_data"] = True
        entries.append({"key": name, "value": value})
    return {"name": "one request", "batch_size": 1 if batched else 0, "inputs": entries}


def ensemble(name: str, preprocess: tuple, network: str, net_tensors, max_batch_size: int,
             labels=None) -> dict:
    """``<name>``: encoded images through ``<name>_preprocess`` into ``network``."""
    pre_in, pre_out = preprocess
    net_in, net_out = net_tensors
    (net_input,) = net_in
    outputs = {**net_out, "valid": pre_out["valid"]}
    c = config(name, {"platform": "ensemble"}, pre_in, outputs, max_batch_size, reshape=False,
               labels=labels)
    c["ensemble_scheduling"] = {"step": [
        {"model_name": f"{name.removesuffix('_cpu')}_preprocess", "model_version": -1,
         "input_map": [{"key": "images", "value": "images"}],
         "output_map": [{"key": "images", "value": "prepared"},
                        {"key": "valid", "value": "valid"}]},
        {"model_name": network, "model_version": -1,
         "input_map": [{"key": net_input, "value": "prepared"}],
         "output_map": [{"key": k, "value": k} for k in sorted(net_out)]}]}
    return c


class _Repository:
    """The models being written into the staged repository, each with its next version."""

    def __init__(self, stage: str, existing: str, replace: bool):
        self.stage, self.existing, self.replace = stage, existing, replace
        self.written: list[str] = []

    def add(self, c: dict, extra: dict[str, str] | None = None) -> str:
        """Model ``c["name"]``: its config, the files ``extra`` names (path in the model's
        folder -> source file), and the earlier versions (unless replacing); returns its new
        version's folder."""
        name = c["name"]
        model = os.path.join(self.stage, name)
        old = os.path.join(self.existing, name)
        versions = sorted(int(v) for v in os.listdir(old) if v.isdigit()) \
            if os.path.isdir(old) and not self.replace else []
        os.makedirs(model)
        for v in versions:  # hard links: an earlier version costs no space
            shutil.copytree(os.path.join(old, str(v)), os.path.join(model, str(v)),
                            copy_function=files.link_or_copy)
        version = os.path.join(model, str(versions[-1] + 1 if versions else 1))
        os.makedirs(version)
        for rel, src in (extra or {}).items():
            os.makedirs(os.path.dirname(os.path.join(model, rel)), exist_ok=True)
            files.link_or_copy(src, os.path.join(model, rel))
        write_text(os.path.join(model, "config.pbtxt"), to_text(c))
        self.written.append(name)
        return version


def names(serving) -> set[str]:
    """Every model an export of ``serving`` may write in a repository, and the TensorRT ones
    ``build_engines.sh`` adds: a new export drops those (their engines are of the earlier
    weights; the script builds them anew)."""
    n = serving.triton_name
    return {f"{n}{s}" for s in ("", "_cpu", "_savedmodel", "_onnx", "_preprocess", "_python",
                                 "_tensorrt", "_tensorrt_int8")}


def write_repository(serving, export_dir: str, triton_dir: str, replace: bool = False
                     ) -> list[str]:
    """The model repository of the export in ``export_dir`` at ``triton_dir`` (and the
    TensorRT models that wait for their engines in ``triton_dir.tensorrt``), written beside
    and swapped in whole; the lines that say what was written and how to serve it."""
    name, batch = serving.triton_name, serving.triton_max_batch_size
    info = serving_lib.read_client_info(export_dir)
    labels_file = os.path.join(export_dir, "assets", info.get("labels") or "-")
    labels = {"probabilities": "labels.txt"} if os.path.isfile(labels_file) else None
    label_files = {"labels.txt": labels_file} if labels else {}
    onnx_path = os.path.join(export_dir, "model.onnx")
    net = _onnx_tensors(onnx_path) if os.path.exists(onnx_path) else None
    with files.staged_dir(triton_dir, "the Triton model repository",
                          replaces=names(serving)) as stage:
        repo = _Repository(stage, triton_dir, replace)
        with tempfile.TemporaryDirectory(dir=stage) as tmp:
            inputs, outputs = _saved_model_tensors(export_dir)
            batched = _batched(inputs, outputs)
            warm = {}
            if "string" in {d for d, _ in inputs.values()}:
                warm = {"warmup/images": _warmup_image(tmp, serving.flags.image_size)}
            version = repo.add(config(
                f"{name}_savedmodel", {"platform": "tensorflow_savedmodel"}, inputs, outputs,
                batch, labels=labels, warmup=_warmup(inputs, batched, "images")),
                {**label_files, **warm})
            shutil.copytree(export_dir, os.path.join(version, "model.savedmodel"),
                            ignore=shutil.ignore_patterns("*.onnx"),
                            copy_function=files.link_or_copy)
            if net:
                net_batched = _batched(*net)
                version = repo.add(config(
                    f"{name}_onnx", {"platform": "onnxruntime_onnx"}, *net, batch, labels=labels,
                    warmup=_warmup(net[0], net_batched)), label_files)
                files.link_or_copy(onnx_path, os.path.join(version, "model.onnx"))
            preprocess = serving.preprocess()
            if preprocess is not None:
                pre = _write_preprocess(repo, serving, preprocess, tmp, batch, warm)
                if net:
                    version = repo.add(config(
                        f"{name}_python", {"backend": "python"}, *net, batch, reshape=False,
                        labels=labels, cpu=True, warmup=_warmup(net[0], net_batched)),
                        label_files)
                    files.link_or_copy(onnx_path, os.path.join(version, "model.onnx"))
                    shutil.copy2(os.path.join(PYTHON_MODELS, "onnxruntime_cpu.py"),
                                 os.path.join(version, "model.py"))
                    for plain, network in ((name, f"{name}_onnx"), (f"{name}_cpu",
                                                                     f"{name}_python")):
                        repo.add(ensemble(plain, pre, network, net, batch, labels), label_files)
    lines = [f"wrote a Triton model repository to {triton_dir} ({', '.join(repo.written)})"]
    if net:
        lines += write_tensorrt(serving, export_dir, triton_dir, net, labels_file if labels
                                else None, preprocess is not None)
    return lines


def _write_preprocess(repo, serving, preprocess, tmp, batch, warm):
    """``<name>_preprocess``: the export's preprocessing as a SavedModel of its own (no
    weights) run by ``triton_python/preprocess.py``; returns its (inputs, outputs)."""
    import tensorflow as tf
    size = serving.flags.image_size
    inputs = {"images": ("string", [None])}
    outputs = {"images": ("float32", [None, size, size, 3]), "valid": ("bool", [None])}
    version = repo.add(config(f"{serving.triton_name}_preprocess", {"backend": "python"},
                              inputs, outputs, batch, reshape=False, cpu=True,
                              warmup=_warmup(inputs, True, "images")), warm)
    module = tf.Module()
    module.preprocess = preprocess
    tf.saved_model.save(module, os.path.join(version, "model.savedmodel"),
                        signatures={"serving_default": preprocess})
    shutil.copy2(os.path.join(PYTHON_MODELS, "preprocess.py"), os.path.join(version, "model.py"))
    return inputs, outputs


def _warmup_image(tmp: str, size: int) -> str:
    """A grey JPEG of the input's size as Triton's warm-up reads a string: its length (4 bytes,
    little-endian), then its bytes."""
    import tensorflow as tf
    jpeg = tf.io.encode_jpeg(tf.fill([size, size, 3], tf.constant(128, tf.uint8))).numpy()
    path = os.path.join(tmp, "warmup-images")
    with open(path, "wb") as fh:
        fh.write(struct.pack("<I", len(jpeg)) + jpeg)
    return path


def engine_command(onnx_path: str, plan_path: str, inputs, max_batch_size: int,
                   int8: bool = False) -> str:
    """The trtexec line that builds an engine: shapes from one row to ``max_batch_size`` rows
    of the ONNX input, FP16 allowed (as NVIDIA's deployments build), with ``int8`` the Q/DQ
    graph's INT8 layers too."""
    def shapes(rows):
        return ",".join(f"{n}:" + "x".join(str(rows if d is None else d) for d in shape)
                        for n, (_, shape) in sorted(inputs.items()))
    return (f"trtexec --onnx={onnx_path} --saveEngine={plan_path} "
            f"{'--int8 ' if int8 else ''}--fp16 "
            f"--minShapes={shapes(1)} --optShapes={shapes(max_batch_size)} "
            f"--maxShapes={shapes(max_batch_size)}")


def write_tensorrt(serving, export_dir: str, triton_dir: str, net, labels_file, image: bool
                   ) -> list[str]:
    """``triton_dir.tensorrt``: each TensorRT model's config and the ONNX graph its engine is
    built from (``Serving.tensorrt_onnx``), an ensemble over the FP16 one, and
    ``build_engines.sh``."""
    name, batch = serving.triton_name, serving.triton_max_batch_size
    pending = triton_dir.rstrip(os.sep) + ".tensorrt"
    built = []
    with files.staged_dir(pending, "the TensorRT models to build", replaces={
            name, f"{name}_tensorrt", f"{name}_tensorrt_int8", "build_engines.sh"}) as stage:
        for suffix, int8 in (("_tensorrt", False), ("_tensorrt_int8", True)):
            model = os.path.join(stage, f"{name}{suffix}")
            os.makedirs(model)
            source = os.path.join(model, "model.onnx")
            if not serving.tensorrt_onnx(export_dir, int8, source):
                os.rmdir(model)
                continue
            tensors = _onnx_tensors(source)
            labels = {"probabilities": "labels.txt"} if labels_file else None
            if labels_file:
                files.link_or_copy(labels_file, os.path.join(model, "labels.txt"))
            write_text(os.path.join(model, "config.pbtxt"), to_text(config(
                f"{name}{suffix}", {"platform": "tensorrt_plan"}, *tensors, batch,
                labels=labels, warmup=_warmup(tensors[0], _batched(*tensors)))))
            built.append((f"{name}{suffix}", int8, tensors[0]))
        if image and built:
            pre = ({"images": ("string", [None])},
                   {"valid": ("bool", [None])})
            os.makedirs(os.path.join(stage, name))
            c = ensemble(name, pre, built[0][0], _onnx_tensors(
                os.path.join(stage, built[0][0], "model.onnx")), batch,
                {"probabilities": "labels.txt"} if labels_file else None)
            write_text(os.path.join(stage, name, "config.pbtxt"), to_text(c))
        script = os.path.join(stage, "build_engines.sh")
        write_text(script, _engine_script(name, built, batch, image))
        os.chmod(script, 0o755)
    return [f"TensorRT: bash {os.path.join(pending, 'build_engines.sh')} on the serving GPU "
            f"builds {' and '.join(m for m, _, _ in built)} and adds them to {triton_dir}"]


def _engine_script(name: str, built, batch: int, image: bool) -> str:
    lines = [
        "#!/usr/bin/env bash",
        "# Builds this export's TensorRT engines on the GPU that will serve them (an engine is",
        "# tied to its GPU and TensorRT version; NVIDIA's TensorRT container has trtexec), then",
        "# moves each model, config and plan, into the repository whole"
        + (f" and points the {name} ensemble at the FP16 engine." if image else "."),
        "#   bash build_engines.sh [--dry-run]      (REPO=... for a repository moved elsewhere)",
        "set -euo pipefail",
        'HERE=$(cd "$(dirname "$0")" && pwd)',
        'REPO=${REPO:-${HERE%.tensorrt}}',
        'DRY=0; [ "${1:-}" = --dry-run ] && DRY=1',
        'run() { echo "+ $*"; [ "$DRY" = 1 ] || "$@"; }',
        'if [ "$DRY" = 0 ] && ! command -v trtexec >/dev/null; then',
        '  echo "build_engines.sh: trtexec is not on PATH: run this in NVIDIA\'s TensorRT '
        'container (nvcr.io/nvidia/tensorrt:<yy.mm>-py3) on the serving GPU" >&2',
        "  exit 2",
        "fi",
        '[ -d "$REPO" ] || { echo "build_engines.sh: no repository at $REPO (set REPO)" >&2; '
        "exit 2; }",
        "install() {  # MODEL: its config and plan into \"$REPO/MODEL\", whole",
        '  local m=$1 staged="$HERE/.$1.installing"',
        '  run rm -rf "$staged"',
        '  run mkdir -p "$staged/1"',
        '  run cp "$HERE/$m/config.pbtxt" "$staged/"',
        '  [ ! -f "$HERE/$m/labels.txt" ] || run cp "$HERE/$m/labels.txt" "$staged/"',
        '  run mv "$HERE/$m/model.plan" "$staged/1/model.plan"',
        '  run rm -rf "$REPO/$m"',
        '  run mv "$staged" "$REPO/$m"',
        "}"]
    for model, int8, inputs in built:
        lines.append(f'run {engine_command(f"$HERE/{model}/model.onnx", f"$HERE/{model}/model.plan", inputs, batch, int8)}')  # noqa: E501
        lines.append(f"install {model}")
    if image and built:
        lines.append(f'run cp "$HERE/{name}/config.pbtxt" "$REPO/{name}/config.pbtxt"')
    lines.append('echo "installed in $REPO: ' + " ".join(m for m, _, _ in built)
                 + ('; the ensemble ' + name + ' now runs ' + built[0][0] if image and built
                    else "") + ' (a running server picks them up with --model-control-mode='
                 'poll, or at its next start)"')
    return "\n".join(lines) + "\n"


def write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
