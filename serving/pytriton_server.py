"""Serve an export's SavedModel through a real Triton Inference Server, without Triton's
containers: PyTriton (``nvidia-pytriton``) ships Triton's server binary and serves a Python
function, here the SavedModel's signature. For trying the client and the export on any machine
(a CPU included); on GPU machines, serve the ``--export_triton`` model repository with
Triton's own container (README, "Deployment").

    "$(bash scripts/triton_env.sh)" -m serving.pytriton_server --export_dir export

It serves ``--signature`` (``serving_default``) under the name of the repository's SavedModel
model (``client.json``'s ``savedmodel_model``) with the same inputs and outputs, so
``serving/image_client.py`` talks to either; requests are batched. A model whose
signatures carry a state (Transformer-XL's memory) is refused with one line: the repository's
sequence model keeps the state in the server. Runs until interrupted (Ctrl-C, SIGTERM);
``--ready_file`` is written once the
model is ready. What it cannot serve (a folder that is no export, a cut SavedModel or
``client.json``, a signature the export lacks, a port in use) stops it with one line, exit 1.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import sysconfig

from serving.connection import CommandError


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


def read_export(export_dir: str) -> dict:
    """The export's ``client.json``, once the folder is checked to hold an export."""
    info_path = os.path.join(export_dir, "assets", "client.json")
    if not os.path.isdir(export_dir):
        raise CommandError(f"--export_dir {export_dir}: no such directory")
    if not os.path.exists(info_path):
        raise CommandError(f"{export_dir} holds no export of this repository (no "
                           "assets/client.json): give what --export_dir wrote")
    if not os.path.exists(os.path.join(export_dir, "saved_model.pb")):
        raise CommandError(f"{export_dir} has no saved_model.pb: the export is incomplete; "
                           "export it again (main.py --mode evaluate --export_dir ...)")
    try:
        with open(info_path, encoding="utf-8") as fh:
            info = json.load(fh)
        key = "savedmodel_model" if "savedmodel_model" in info else "triton_model"  # older
        if not isinstance(info[key], str) or not info[key]:
            raise TypeError(f"{key} is {info[key]!r}, not a model's name")
        info["served_name"] = info[key]
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise CommandError(f"{info_path} is damaged ({type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else ''}): export again") from None
    if info.get("sequence_model"):
        raise CommandError(f"{export_dir}: {info.get('model', 'this model')} carries a state "
                           "from request to request, which PyTriton would send back and forth "
                           "with each request: serve the repository's sequence model "
                           f"{info['sequence_model']} instead (main.py --export_triton DIR; "
                           "serving/tritonserver.py --model-repository=DIR/cpu)")
    return info


def check_ports(ports: dict[str, int]) -> None:
    """Each port distinct and free to listen on, or one line naming the flag."""
    import socket
    seen = {}
    for flag, port in ports.items():
        if port in seen:
            raise CommandError(f"{flag} {port} is {seen[port]}'s too: give each its own port")
        seen[port] = flag
    for flag, port in ports.items():
        if not 0 < port < 65536:
            raise CommandError(f"{flag} {port} is not a port number")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("0.0.0.0", port))
            except OSError as e:
                raise CommandError(f"{flag} {port} cannot be used ({e.strerror}): choose "
                                   "another") from None


def check_arguments(args) -> None:
    """What the command line can get wrong before anything starts, one line each."""
    import re
    if args.max_batch_size < 1:
        raise CommandError(f"--max_batch_size {args.max_batch_size}: at least 1 (the most "
                           "requests batched into one call)")
    if args.model_name is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", args.model_name):
        raise CommandError(f"--model_name {args.model_name!r}: letters, digits, _ . - only (a "
                           "Triton model name is a directory name and a URL path segment)")
    if args.ready_file:
        folder = os.path.dirname(os.path.abspath(args.ready_file))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise CommandError(f"--ready_file {args.ready_file}: its folder {folder} is not a "
                               "writable directory")


def load_signature(export_dir: str, signature: str):
    import tensorflow as tf
    try:
        loaded = tf.saved_model.load(export_dir)
    except (tf.errors.OpError, ValueError, OSError, IndexError, RuntimeError) as e:
        why = str(getattr(e, "message", "") or e).strip().splitlines()
        raise CommandError(f"{export_dir}: the SavedModel cannot be loaded ("
                           f"{why[0][:200] if why else type(e).__name__}): export again"
                           ) from None
    if signature not in loaded.signatures:
        raise CommandError(f"--signature {signature}: the export has "
                           f"{', '.join(sorted(loaded.signatures))}")
    return loaded.signatures[signature]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--export_dir", required=True, help="what --export_dir wrote")
    p.add_argument("--signature", default="serving_default")
    p.add_argument("--model_name", help="default: client.json's savedmodel_model")
    p.add_argument("--max_batch_size", type=int, default=64)
    p.add_argument("--http_port", type=int, default=8000)
    p.add_argument("--grpc_port", type=int, default=8001)
    p.add_argument("--metrics_port", type=int, default=8002)
    p.add_argument("--ready_file", help="written once the model is ready")
    args = p.parse_args(argv)
    try:
        check_arguments(args)
        info = read_export(args.export_dir)
        check_ports({"--http_port": args.http_port, "--grpc_port": args.grpc_port,
                     "--metrics_port": args.metrics_port})
        _use_this_libpython()
        fn = load_signature(args.export_dir, args.signature)
    except CommandError as e:
        print(f"pytriton_server.py: error: {e}", file=sys.stderr)
        return 1
    from pytriton.model_config import ModelConfig
    from pytriton.triton import Triton, TritonConfig

    inputs, outputs, batched = tensors(fn)
    name = args.model_name or info["served_name"]
    config = TritonConfig(http_port=args.http_port, grpc_port=args.grpc_port,
                          metrics_port=args.metrics_port)
    # A SIGTERM (docker stop, a service manager) stops the server as Ctrl-C does: PyTriton
    # handles SIGINT alone, and a SIGTERM ended this process with its tritonserver left running.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
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
