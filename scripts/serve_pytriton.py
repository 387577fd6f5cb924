#!/usr/bin/env python3
"""Serve an export's SavedModel through a real Triton Inference Server, without Triton's
containers: PyTriton (``nvidia-pytriton``) ships Triton's server binary and serves a Python
function, here the SavedModel's signature. For trying the client and the export on any machine
(a CPU included); on GPU machines, serve the ``--export_triton`` model repository with
Triton's own container (README, "Deployment").

    python "$(bash scripts/triton_env.sh)" scripts/serve_pytriton.py --export_dir export

It serves ``--signature`` (``serving_default``) under the name of the repository's SavedModel
model (``client.json``'s ``triton_model``) with the same inputs and outputs, so
``scripts/triton_client.py`` talks to either. Requests are batched where every tensor leads
with the batch (the image models); Transformer-XL's memory does not, so it is served
unbatched. Runs until interrupted (Ctrl-C, SIGTERM); ``--ready_file`` is written once the
model is ready.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig


def _use_this_libpython() -> None:
    """Triton's Python backend stub loads libpython by name: where the system has its own
    libpython of the same minor version (Debian's), the stub would run this interpreter's
    standard library on another patch release's libpython. This interpreter's library goes
    first."""
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir and os.path.isdir(libdir):
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(
            [libdir, *filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep))])


def tensors(fn):
    """(inputs, outputs, batched) of a signature: name -> (tf dtype, shape with None)."""
    inputs = {k: (v.dtype, list(v.shape)) for k, v in
              sorted(fn.structured_input_signature[1].items())}
    outputs = {k: (v.dtype, list(v.shape)) for k, v in fn.structured_outputs.items()}
    batched = all(s and s[0] is None for _, s in [*inputs.values(), *outputs.values()])
    return inputs, outputs, batched


def _spec(name, dtype, shape, batched):
    import numpy as np
    from pytriton.model_config import Tensor
    dims = shape[1:] if batched else shape
    return Tensor(name=name, dtype=bytes if dtype.name == "string" else np.dtype(dtype.name),
                  shape=tuple(-1 if d is None else d for d in dims) or (1,))


def infer_function(fn, inputs, outputs, batched):
    """The function PyTriton calls with each (batched) request: Triton's arrays in, the
    signature's outputs out. A value per batch row travels as (rows, 1), as the repository's
    configs have it (``reshape``)."""
    import tensorflow as tf

    def infer(**arrays):
        args = {}
        for name, (dtype, shape) in inputs.items():
            a = arrays[name]
            if batched and len(shape) == 1:
                a = a.reshape(-1)
            args[name] = tf.constant(a.astype(object) if dtype == tf.string else a, dtype)
        out = {}
        for name, value in fn(**args).items():
            v = value.numpy()
            out[name] = v[:, None] if batched and v.ndim == 1 else v
        return out
    if batched:
        from pytriton.decorators import batch
        return batch(infer)
    return lambda requests: [infer(**r) for r in requests]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--export_dir", required=True, help="what --export_dir wrote")
    p.add_argument("--signature", default="serving_default")
    p.add_argument("--model_name", help="default: client.json's triton_model")
    p.add_argument("--max_batch_size", type=int, default=64)
    p.add_argument("--http_port", type=int, default=8000)
    p.add_argument("--grpc_port", type=int, default=8001)
    p.add_argument("--metrics_port", type=int, default=8002)
    p.add_argument("--ready_file", help="written once the model is ready")
    args = p.parse_args(argv)

    info_path = os.path.join(args.export_dir, "assets", "client.json")
    if not os.path.exists(info_path):
        print(f"serve_pytriton.py: error: {args.export_dir} holds no export of this repository "
              "(no assets/client.json)", file=sys.stderr)
        return 1
    with open(info_path, encoding="utf-8") as fh:
        info = json.load(fh)
    _use_this_libpython()
    import tensorflow as tf
    from pytriton.model_config import ModelConfig
    from pytriton.triton import Triton, TritonConfig

    fn = tf.saved_model.load(args.export_dir).signatures[args.signature]
    inputs, outputs, batched = tensors(fn)
    name = args.model_name or info["triton_model"]
    config = TritonConfig(http_port=args.http_port, grpc_port=args.grpc_port,
                          metrics_port=args.metrics_port)
    with Triton(config=config) as triton:
        triton.bind(model_name=name, infer_func=infer_function(fn, inputs, outputs, batched),
                    inputs=[_spec(k, *v, batched) for k, v in inputs.items()],
                    outputs=[_spec(k, *v, batched) for k, v in outputs.items()],
                    config=ModelConfig(max_batch_size=args.max_batch_size if batched else 0,
                                       batching=batched),
                    strict=True)
        triton.run()
        print(f"serving {args.export_dir} ({args.signature}) as {name}: HTTP "
              f"localhost:{args.http_port}, gRPC localhost:{args.grpc_port}", flush=True)
        if args.ready_file:
            with open(args.ready_file, "w") as fh:
                fh.write(name + "\n")
        triton.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
