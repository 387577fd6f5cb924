"""The TensorRT models of ``--export_triton DIR``, waiting for their engines in
``DIR.tensorrt/``: each model's config and the ONNX graph its engine is built from
(``ExportSpec.tensorrt_onnx``: ``<name>_tensorrt`` FP16 from ``model.onnx``, SSD320's from the
graph before NMS with EfficientNMS on it, ``ExportSpec.tensorrt_rewrite``;
``<name>_tensorrt_int8`` from the INT8 form), the image models' ensemble over the FP16 one, and
``build_engines.sh``: ``build_engines.sh`` beside this module with its values filled in (the
engines, their optimisation profiles, the ensemble), which builds each plan with ``trtexec`` on
the serving GPU and moves the model whole into ``DIR/triton``.
Nothing is in a repository before its plan exists: Triton refuses to start with a model that
has no version. A model with ``implicit_state`` (Transformer-XL) is a sequence whose state
Triton keeps on the GPU (``stateful_config``), here and in ``DIR/triton``."""
from __future__ import annotations

import importlib
import os
import shlex

from common import files
from common.export.triton.config import (
    batched,
    config,
    ensemble,
    max_sequences,
    onnx_tensors,
    stateful,
    to_text,
    warmup,
    write_text,
)

TEMPLATE = os.path.join(os.path.dirname(__file__), "build_engines.sh")
# The one NGC release of the GPU serving path: the Triton image docker/Dockerfile.triton builds
# on (its RELEASE), and the TensorRT container that builds the engines it serves (an engine
# loads only under the TensorRT it was built with: the same yy.mm carries the same TensorRT).
# 25.02 is the last Triton with the TensorFlow backend (DIR/tensorflow) and the release of the
# default training image. The documented commands name it; tests/test_docs.py holds them to it.
NGC_RELEASE = "25.02"


def stateful_config(spec, described: dict, name: str, kind: dict, tensors,
                    optional=(), max_segment: int | None = None) -> dict:
    """A model of the export's ONNX whose state Triton keeps (``config.stateful``; ``spec``, the
    ``ExportSpec``, names the state): as many open sequences as the Python backend's model
    keeps (``max_sequences`` of their states), and the parameters clients read
    (``vocab_size``, ``vocab_sha256``, ``max_segment``: the export's, or the engine profile's
    longest segment), from its client.json (``described``)."""
    c = stateful(name, kind, *tensors, dict(spec.implicit_state), spec.triton_max_batch_size,
                 max_sequences(described.get("state_bytes")), optional)
    params = {"vocab_size": described.get("vocab_size"),
              "vocab_sha256": described.get("vocab_sha256"),
              "max_segment": max_segment or described.get("max_segment")}
    c["parameters"] = [{"key": k, "value": {"string_value": str(v)}}
                       for k, v in params.items() if v is not None]
    return c


def engine_shapes(module, inputs, rows: int, least: bool = False) -> dict[str, list[int]]:
    """The ONNX ``inputs``' shapes in a TensorRT optimisation profile at ``rows`` rows
    (``least``: the profile's smallest): the ``ExportModule``'s ``engine_shapes`` past the batch
    dimension where it names an input, else every dimension of unknown size the batch's."""
    out = {}
    for n, (_, shape) in inputs.items():
        if n in module.engine_shapes:
            out[n] = [rows, *module.engine_shapes[n][0 if least else 1]]
        else:
            out[n] = [rows if d is None else d for d in shape]
    return out


def profile(module, inputs, max_batch_size: int) -> tuple[str, str, str]:
    """trtexec's ``--minShapes``, ``--optShapes`` and ``--maxShapes`` of an engine over the ONNX
    ``inputs``: from one row (``engine_shapes``' smallest) to ``max_batch_size``."""
    def shapes(rows, least=False):
        return ",".join(f"{n}:" + "x".join(str(d) for d in shape) for n, shape in
                        sorted(engine_shapes(module, inputs, rows, least).items()))
    return shapes(1, True), shapes(max_batch_size), shapes(max_batch_size)


def engine_graph(spec, export_dir: str, int8: bool, out_path: str) -> bool:
    """The ONNX graph the engine is built from at ``out_path``: the export's
    ``spec.tensorrt_onnx`` (its INT8 form for the INT8 engine) rewritten by
    ``spec.tensorrt_rewrite`` where it names a function, else without the defaults of its
    inputs (``onnx_defaults``) where it has any, else linked or copied as it is; False when the
    export has no such file."""
    from common.export import onnx_convert, onnx_int8
    name = spec.tensorrt_onnx
    src = os.path.join(export_dir, onnx_int8.int8_name(name) if int8 else name)
    if not os.path.exists(src):
        return False
    if spec.tensorrt_rewrite:
        where, function = spec.tensorrt_rewrite.split(":")
        getattr(importlib.import_module(where), function)(src, out_path)
    elif spec.onnx_defaults:
        onnx_convert.without_defaults(src, out_path)
    else:
        files.link_or_copy(src, out_path)
    return True


def script(engines: list[tuple[str, bool, tuple[str, str, str]]], ensemble_name: str | None
           ) -> str:
    """``build_engines.sh`` for ``engines`` ((model, INT8, profile) each) and the ensemble that
    the FP16 engine serves."""
    with open(TEMPLATE, encoding="utf-8") as fh:
        text = fh.read()
    rows = "\n".join("  " + shlex.quote("|".join([model, "--int8" if int8 else "", *shapes]))
                     for model, int8, shapes in engines)
    return text.replace("@ENGINES@", rows).replace(
        "@ENSEMBLE@", shlex.quote(ensemble_name) if ensemble_name else '""').replace(
        "@RELEASE@", NGC_RELEASE)


def write(module, export_dir: str, triton_dir: str, labels_file, image: bool, log=None,
          described: dict | None = None) -> list[str]:
    """``triton_dir.tensorrt``: the TensorRT models to build and their script; the line that
    says how. ``described``: the export's client.json (a stateful model's config reads it)."""
    spec = module.spec
    name, batch = spec.triton_name, spec.triton_max_batch_size
    pending = triton_dir.rstrip(os.sep) + ".tensorrt"
    built = []
    with files.staged_dir(pending, "the TensorRT models to build", replaces={
            name, f"{name}_tensorrt", f"{name}_tensorrt_int8", "build_engines.sh"},
            log=log) as stage:
        for suffix, int8 in (("_tensorrt", False), ("_tensorrt_int8", True)):
            model = os.path.join(stage, f"{name}{suffix}")
            os.makedirs(model)
            source = os.path.join(model, "model.onnx")
            if not engine_graph(spec, export_dir, int8, source):
                os.rmdir(model)
                continue
            tensors = onnx_tensors(source)
            labels = {"probabilities": "labels.txt"} if labels_file else None
            if labels_file:
                files.link_or_copy(labels_file, os.path.join(model, "labels.txt"))
            kind = {"platform": "tensorrt_plan"}
            # An engine's longest segment: its profile's (engine_shapes at the most rows).
            c = stateful_config(spec, described, f"{name}{suffix}", kind, tensors,
                                max_segment=engine_shapes(
                                    module, tensors[0], batch)["tokens"][1]) \
                if spec.implicit_state else config(
                    f"{name}{suffix}", kind, *tensors, batch, labels=labels,
                    warmup=warmup(tensors[0], batched(*tensors)))
            write_text(os.path.join(model, "config.pbtxt"), to_text(c))
            built.append((f"{name}{suffix}", int8, profile(module, tensors[0], batch)))
        if image and built:
            pre = ({"images": ("string", [None])},
                   {"valid": ("bool", [None])})
            os.makedirs(os.path.join(stage, name))
            c = ensemble(name, f"{name}_preprocess", pre, built[0][0], onnx_tensors(
                os.path.join(stage, built[0][0], "model.onnx")), batch,
                {"probabilities": "labels.txt"} if labels_file else None)
            write_text(os.path.join(stage, name, "config.pbtxt"), to_text(c))
        path = os.path.join(stage, "build_engines.sh")
        write_text(path, script(built, name if image and built else None))
        os.chmod(path, 0o755)
    return [f"TensorRT: bash {os.path.join(pending, 'build_engines.sh')} on the serving GPU, "
            f"in nvcr.io/nvidia/tensorrt:{NGC_RELEASE}-py3 (the release of the Triton image "
            f"that serves them), builds {' and '.join(m for m, _, _ in built)} and adds them to "
            f"{os.path.join(triton_dir, 'triton')}"]
