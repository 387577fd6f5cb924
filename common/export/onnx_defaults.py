"""Inputs of an ONNX graph that a caller may leave out (``ExportSpec.onnx_defaults``): ONNX's
default value of a graph input is an initializer of the same name, which ONNX Runtime feeds
when the input is not given and which TensorRT's parser would take for a constant."""
from __future__ import annotations


def with_defaults(path: str, defaults) -> None:
    """Inputs of the ONNX file at ``path`` that a caller may leave out: each also an
    initializer of zeros of its ``defaults`` shape (ONNX's default value of a graph input;
    ONNX Runtime feeds it when the input is not given)."""
    if not defaults:
        return
    import numpy as np
    import onnx
    from onnx import numpy_helper
    model = onnx.load(path)
    types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    for name, shape in defaults.items():
        dtype = onnx.helper.tensor_dtype_to_np_dtype(types[name])
        model.graph.initializer.append(numpy_helper.from_array(np.zeros(shape, dtype), name))
    onnx.save(model, path)


def without_defaults(src: str, dst: str) -> None:
    """The ONNX file at ``src`` written to ``dst`` without its inputs' default values (the
    initializers named as graph inputs): every input is then the caller's."""
    import onnx
    model = onnx.load(src)
    inputs = {i.name for i in model.graph.input}
    kept = [t for t in model.graph.initializer if t.name not in inputs]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    onnx.save(model, dst)
