#!/usr/bin/env python3
"""Start the Triton Inference Server binary that ``nvidia-pytriton`` ships on a model
repository, without Triton's containers (a CPU is enough):

    TRITON_PY=$(bash scripts/triton_env.sh)
    $TRITON_PY -m serving.tritonserver --model-repository=/results/triton/cpu

Every argument goes to ``tritonserver`` as it is, and nothing else but the backend directory:
Triton's own defaults hold (``--exit-on-error=true``, strict readiness), so a model that
cannot load stops the server, and ``/v2/health/ready`` answers 200 once every model is ready.
That binary has the Python backend only: serve the ``cpu`` repository that ``--export_triton``
writes (every model there runs on the Python backend), not ``triton`` or ``tensorflow``, which
need Triton's container (docs/deployment.md).

What PyTriton prepares before it starts the same binary is done here: the Python backend's
stub for this interpreter's version (PyTriton keeps one per Python version) in a backend
directory of its own, this interpreter's libpython and PyTriton's libraries on the library
path, and this interpreter's ``bin`` first on ``PATH``, so that the Python models run with
this environment's packages (TensorFlow for ``<name>_preprocess`` and Transformer-XL's
sequence model, onnxruntime for ``<name>_python``). ``TRITONSERVER_PYTHON=/path/to/python``
runs them with another environment's Python instead (as a container's system Python holds
docker/triton-requirements.txt): its version's stub, its libpython, its ``bin`` first.
"""
from __future__ import annotations

# The standard library only: serving.load starts this file by its path, and triton_perf.sh's
# users put it on PATH as the tritonserver it runs.
import os
import subprocess
import sys
import sysconfig

PROG = "tritonserver.py"


def _python_of(python: str) -> tuple[str, str]:
    """(``X.Y``, the folder of its libpython) of the interpreter ``python``."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return "{}.{}".format(*sys.version_info[:2]), sysconfig.get_config_var("LIBDIR")
    try:
        out = subprocess.run([python, "-c", "import sys, sysconfig; print('%d.%d' % "
                              "sys.version_info[:2]); print(sysconfig.get_config_var('LIBDIR'))"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        raise SystemExit(f"{PROG}: error: TRITONSERVER_PYTHON={python} does not run") from None
    version, libdir = out.split()
    return version, libdir


def server_files(version: str) -> tuple[str, str, str]:
    """(the tritonserver binary, a backend directory with the stub for Python ``version``, the
    folder of the libraries it links), from the installed ``nvidia-pytriton``."""
    try:
        import pytriton
    except ImportError:
        venvs = os.path.join(_cache(), "venvs") + os.sep
        if os.path.realpath(sys.prefix).startswith(os.path.realpath(venvs)):
            # The environment scripts/triton_env.sh made, broken since.
            raise SystemExit(f"{PROG}: error: nvidia-pytriton cannot be imported in "
                             f"{sys.prefix}, which scripts/triton_env.sh made: run "
                             "scripts/triton_env.sh again, which repairs it (or remove "
                             f"{sys.prefix} and it makes it anew)") from None
        raise SystemExit(f"{PROG}: error: nvidia-pytriton is not installed here: run it with "
                         "the python scripts/triton_env.sh prints") from None
    root = os.path.join(os.path.dirname(pytriton.__file__), "tritonserver")
    libs = os.path.join(os.path.dirname(os.path.dirname(pytriton.__file__)),
                        "nvidia_pytriton.libs")
    stub = os.path.join(root, "python_backend_stubs", version, "triton_python_backend_stub")
    if not os.path.isfile(stub):
        raise SystemExit(f"{PROG}: error: nvidia-pytriton has no Python backend stub for "
                         f"Python {version}")
    backends = os.path.join(_cache(), "tritonserver",
                            f"pytriton-{pytriton.__version__}-py{version}")
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


def _cache() -> str:
    """Where scripts/side_env.sh keeps its environments (``venvs/``) and this its backends."""
    return os.environ.get("TF_MODEL_SCRIPTS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tf-model-scripts")


def _export_root(argv: list[str]) -> str | None:
    """A ``--model-repository`` that is ``--export_triton``'s output itself (its ``cpu/``,
    ``triton/`` and ``tensorflow/`` folders are repositories, not models): Triton would take
    ``cpu`` for a model and stop on "Could not determine backend for model 'cpu'"."""
    for i, a in enumerate(argv):
        if a.startswith("--model-repository") or a.startswith("--model-store"):
            path = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            cpu = os.path.join(path, "cpu")
            models = os.listdir(cpu) if os.path.isdir(cpu) else []
            if any(os.path.isfile(os.path.join(cpu, d, "config.pbtxt")) for d in models) and \
                    not os.path.isfile(os.path.join(path, "cpu", "config.pbtxt")):
                return path
    return None


def main(argv: list[str]) -> int:
    root = _export_root(argv)
    if root is not None:
        print(f"tritonserver.py: error: --model-repository {root} holds --export_triton's "
              f"repositories: serve {os.path.join(root, 'cpu')} (this binary has the Python "
              "backend only)", file=sys.stderr)
        return 2
    python = os.environ.get("TRITONSERVER_PYTHON") or sys.executable
    version, libdir = _python_of(python)
    binary, backends, libs = server_files(version)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [libdir, libs,
                                                           env.get("LD_LIBRARY_PATH")]))
    env["PATH"] = os.pathsep.join([os.path.dirname(python), env.get("PATH", "")])
    args = list(argv)
    if not any(a.startswith("--backend-directory") for a in args):
        args.append(f"--backend-directory={backends}")
    sys.stdout.flush()
    os.execve(binary, [binary, *args], env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
