#!/usr/bin/env python3
"""Start the Triton Inference Server binary that ``nvidia-pytriton`` ships on a model
repository, without Triton's containers (a CPU machine is enough):

    TRITON_PY=$(bash scripts/triton_env.sh)
    $TRITON_PY scripts/tritonserver.py --model-repository=/results/triton

Every argument goes to ``tritonserver`` as it is. That binary has the Python backend only, so
of an ``--export_triton`` repository it serves the models that run on it, the image models'
``<name>_cpu`` ensemble (encoded images in, the network through ONNX Runtime) and its parts;
the ``tensorflow``, ``onnxruntime`` and ``tensorrt`` models need Triton's container (README,
"Deployment"). The server is therefore started with ``--exit-on-error=false`` unless the
command line says otherwise, and lists each model's state in its start-up table.

What PyTriton prepares before it starts the same binary is done here: the Python backend's
stub for this interpreter's version (PyTriton keeps one per Python version) in a backend
directory of its own, this interpreter's libpython and PyTriton's libraries on the library
path, and this interpreter's ``bin`` first on ``PATH``, so that the Python models run with
this environment's packages (TensorFlow for ``<name>_preprocess``, onnxruntime for
``<name>_python``).
"""
from __future__ import annotations

import os
import sys
import sysconfig

PROG = "tritonserver.py"


def server_files() -> tuple[str, str, str]:
    """(the tritonserver binary, a backend directory with this Python's stub, the folder of
    the libraries it links), from the installed ``nvidia-pytriton``."""
    try:
        import pytriton
    except ImportError:
        raise SystemExit(f"{PROG}: error: nvidia-pytriton is not installed here: run it with "
                         "the python scripts/triton_env.sh prints") from None
    root = os.path.join(os.path.dirname(pytriton.__file__), "tritonserver")
    libs = os.path.join(os.path.dirname(os.path.dirname(pytriton.__file__)),
                        "nvidia_pytriton.libs")
    version = "{}.{}".format(*sys.version_info[:2])
    stub = os.path.join(root, "python_backend_stubs", version, "triton_python_backend_stub")
    if not os.path.isfile(stub):
        raise SystemExit(f"{PROG}: error: nvidia-pytriton has no Python backend stub for "
                         f"Python {version}")
    cache = os.environ.get("TF_MODEL_SCRIPTS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tf-model-scripts")
    backends = os.path.join(cache, "tritonserver", f"pytriton-{pytriton.__version__}-py{version}")
    python = os.path.join(backends, "python")
    os.makedirs(python, exist_ok=True)
    for src in (stub, *(os.path.join(root, "backends", "python", f) for f in
                        ("libtriton_python.so", "triton_python_backend_utils.py"))):
        link = os.path.join(python, os.path.basename(src))
        if os.path.realpath(link) != os.path.realpath(src):
            tmp = f"{link}.{os.getpid()}"
            os.symlink(src, tmp)
            os.replace(tmp, link)  # one step: two servers starting at once both find it
    return os.path.join(root, "bin", "tritonserver"), backends, libs


def main(argv: list[str]) -> int:
    binary, backends, libs = server_files()
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [
        sysconfig.get_config_var("LIBDIR"), libs, env.get("LD_LIBRARY_PATH")]))
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    args = list(argv)
    if not any(a.startswith("--backend-directory") for a in args):
        args.append(f"--backend-directory={backends}")
    if not any(a.startswith("--exit-on-error") for a in args):
        args.append("--exit-on-error=false")
    sys.stdout.flush()
    os.execve(binary, [binary, *args], env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
