"""The Triton Inference Server side of an export, in one room: the model repositories
(``repository``: one per kind of server, the card in each), their configs (``config``:
batching, instances, the sequence batcher), the TensorRT engines a GPU host builds
(``tensorrt`` and the ``build_engines.sh`` it fills in) and the Python-backend models the
repositories copy (``python_backend/``: the image preprocessing, ONNX Runtime on a CPU,
Transformer-XL's sequence).

The clients and servers that use what is written here are the ``serving`` package, apart from
this project's code.
"""
