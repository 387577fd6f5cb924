"""``--export_triton DIR``: a Triton Inference Server model repository of the export.

Up to three models of one network, each a directory with its ``config.pbtxt`` and version 1:

* ``<name>_savedmodel`` (``tensorflow_savedmodel``): the SavedModel's ``serving_default`` (for
  the image models, encoded images in: a client sends JPEG bytes);
* ``<name>_onnx`` (``onnxruntime_onnx``): ``model.onnx``, when ``--export_onnx`` wrote it;
* ``<name>_tensorrt`` (``tensorrt_plan``): the same network as a TensorRT engine, which only
  ``trtexec`` on the serving GPU can build: ``build_engine.sh`` in its directory builds
  ``1/model.plan`` from ``model.onnx`` (Triton does not start with a model that has no version,
  so the directory holds the config under ``config.pbtxt.pending`` until the engine is built).

Inputs and outputs are named as the model names them (read from the export's ``client.json``,
which describes its signatures, and from the ONNX file). Where every input and output leads
with the batch, Triton batches requests (``max_batch_size``, ``dynamic_batching``);
Transformer-XL's memory leads with the layers, so it is served unbatched (``max_batch_size:
0``, full shapes). The configs are written as text in Triton's ``ModelConfig`` protobuf format;
the tests parse them with Triton's own ``model_config.proto`` (tritonclient).
"""
from __future__ import annotations

import os
import shutil

from common import files
from common.export import serving as serving_lib

DATA_TYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "int32": "TYPE_INT32",
              "int64": "TYPE_INT64", "string": "TYPE_STRING", "uint8": "TYPE_UINT8",
              "bool": "TYPE_BOOL"}
ONNX_TYPES = {1: "float32", 10: "float16", 6: "int32", 7: "int64", 2: "uint8", 9: "bool",
              8: "string"}


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


def _tensor_lines(kind: str, tensors, batched: bool) -> list[str]:
    lines = [f"{kind} ["]
    for n, (name, (dtype, shape)) in enumerate(sorted(tensors.items())):
        dims = shape[1:] if batched else shape
        entry = [f'    name: "{name}"', f"    data_type: {DATA_TYPES[dtype]}"]
        if batched and not dims:  # one value per batch row: Triton's dims cannot be empty
            entry += ["    dims: [ 1 ]", "    reshape: { shape: [ ] }"]
        else:
            entry.append("    dims: [ " + ", ".join(str(-1 if d is None else d) for d in dims)
                         + " ]")
        lines += ["  {", *entry, "  }" + ("," if n < len(tensors) - 1 else "")]
    return lines + ["]"]


def config_text(name: str, platform: str, inputs, outputs, max_batch_size: int,
                extra: tuple[str, ...] = ()) -> str:
    """A model's config.pbtxt (Triton's ``ModelConfig`` in protobuf text format)."""
    batched = _batched(inputs, outputs)
    lines = [f'name: "{name}"', f'platform: "{platform}"',
             f"max_batch_size: {max_batch_size if batched else 0}",
             *_tensor_lines("input", inputs, batched), *_tensor_lines("output", outputs, batched),
             'instance_group [ { kind: KIND_AUTO } ]']
    if batched:
        lines.append("dynamic_batching { }")
    return "\n".join([*lines, *extra]) + "\n"


def engine_command(onnx_path: str, plan_path: str, inputs, max_batch_size: int) -> str:
    """The trtexec line that builds the engine for ``<name>_tensorrt``: shapes from one row to
    ``max_batch_size`` rows of the ONNX input, FP16 allowed (as NVIDIA's deployments build)."""
    def shapes(rows):
        return ",".join(f"{n}:" + "x".join(str(rows if d is None else d) for d in shape)
                        for n, (_, shape) in sorted(inputs.items()))
    return (f"trtexec --onnx={onnx_path} --saveEngine={plan_path} --fp16 "
            f"--minShapes={shapes(1)} --optShapes={shapes(max_batch_size)} "
            f"--maxShapes={shapes(max_batch_size)}")


def write_repository(serving, export_dir: str, triton_dir: str) -> list[str]:
    """The model repository of the export in ``export_dir`` (its SavedModel, and its
    ``model.onnx`` if written) at ``triton_dir``, written beside and swapped in whole; the
    lines that say what was written and how to serve it."""
    name = serving.triton_name
    batch = serving.triton_max_batch_size
    said = []
    with files.staged_dir(triton_dir, "the Triton model repository",
                          replaces={f"{name}_savedmodel", f"{name}_onnx", f"{name}_tensorrt"},
                          ) as stage:
        model = os.path.join(stage, f"{name}_savedmodel")
        shutil.copytree(export_dir, os.path.join(model, "1", "model.savedmodel"),
                        ignore=shutil.ignore_patterns("*.onnx"))
        inputs, outputs = _saved_model_tensors(export_dir)
        _write(os.path.join(model, "config.pbtxt"), config_text(
            f"{name}_savedmodel", "tensorflow_savedmodel", inputs, outputs, batch))
        said.append(f"{name}_savedmodel")
        onnx_path = os.path.join(export_dir, "model.onnx")
        if os.path.exists(onnx_path):
            model = os.path.join(stage, f"{name}_onnx")
            os.makedirs(os.path.join(model, "1"))
            shutil.copy2(onnx_path, os.path.join(model, "1", "model.onnx"))
            inputs, outputs = _onnx_tensors(onnx_path)
            _write(os.path.join(model, "config.pbtxt"), config_text(
                f"{name}_onnx", "onnxruntime_onnx", inputs, outputs, batch))
            said.append(f"{name}_onnx")
            trt = os.path.join(stage, f"{name}_tensorrt")
            os.makedirs(os.path.join(trt, "1"))
            _write(os.path.join(trt, "config.pbtxt.pending"), config_text(
                f"{name}_tensorrt", "tensorrt_plan", inputs, outputs, batch))
            here = '"$(dirname "$0")"'
            _write(os.path.join(trt, "build_engine.sh"), "\n".join([
                "#!/usr/bin/env bash",
                "# Builds this model's TensorRT engine on the GPU that will serve it (an engine",
                "# is tied to its GPU and TensorRT version), then enables the model.",
                "set -euo pipefail", f"cd {here}",
                engine_command(f"../{name}_onnx/1/model.onnx", "1/model.plan", inputs, batch),
                "mv config.pbtxt.pending config.pbtxt", ""]))
            os.chmod(os.path.join(trt, "build_engine.sh"), 0o755)
    lines = [f"wrote a Triton model repository to {triton_dir} ({', '.join(said)})"]
    if len(said) > 1:
        script = os.path.join(triton_dir, f"{name}_tensorrt", "build_engine.sh")
        lines.append(f"TensorRT: bash {script} on the serving GPU builds the engine and adds "
                     f"{name}_tensorrt")
    return lines


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
