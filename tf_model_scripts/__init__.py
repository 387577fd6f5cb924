"""The import name of the ``tf-model-scripts`` distribution, for its Python users:

    from tf_model_scripts import api
    model = api.load("/results/export")

The repository keeps NVIDIA's layout (a top-level ``common/`` beside the model directories,
which a checkout's ``main.py`` runs from), so the wheel installs the top-level packages
``common``, ``rn50``, ``ssd``, ``txl``, ``benchtools`` and ``serving``, names that PyPI's
distributions and users' own folders share. Importing this package (which every model
package does first) checks that each of those names is this
distribution's: a folder of the same name earlier on ``sys.path`` (the working directory of
``python -c``/``python -m``, a ``PYTHONPATH`` entry) or another distribution's package would be
imported instead, silently, or fail far from the cause. One ``ImportError`` line names it,
where it lies and what to do. Only the packages' locations are read: nothing of them runs.
"""
import base64
import hashlib
import importlib.metadata
import importlib.util
import os
import sys

# The packages this distribution installs at the top level (setup.py's, from common/models.py,
# which this package cannot import before it has checked it: tests/test_wheel.py holds the two
# equal).
PACKAGES = ("common", "benchtools", "rn50", "ssd", "txl", "serving")
# Where they lie: beside this package (a wheel's site-packages), or in a checkout, in its root
# or one folder down (the model directories: resnet50v1.5/rn50).
_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


class ForeignPackage(ImportError):
    """A top-level name of this distribution that resolves to something else."""


def _ours(folder: str) -> bool:
    parent = os.path.dirname(folder)
    return _ROOT in (parent, os.path.dirname(parent))


def _installed() -> dict:
    """The packages' ``__init__.py`` files as the wheel's RECORD lists them: path -> sha256
    (none for a checkout or an editable install, whose files are the checkout's)."""
    try:
        files = importlib.metadata.files("tf-model-scripts") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    return {str(f): f.hash.value for f in files
            if f.hash and f.hash.mode == "sha256" and str(f).endswith("/__init__.py")}


def _sha256(path: str) -> str | None:
    """The file's sha256 as a RECORD writes it (urlsafe base64, no padding); None if absent."""
    try:
        with open(path, "rb") as fh:
            digest = hashlib.sha256(fh.read()).digest()
    except OSError:
        return None
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def check(names=PACKAGES) -> None:
    """Raises ``ForeignPackage`` (one line) for the first of ``names`` that resolves to a
    package other than this distribution's."""
    installed = _installed()
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            continue  # not installed (serving's clients need their own environment)
        where = list(spec.submodule_search_locations or []) or \
            [os.path.dirname(spec.origin or "")]
        real = [os.path.realpath(w) for w in where]
        init = os.path.join(real[0], "__init__.py") if real else ""
        recorded = installed.get(f"{name}/__init__.py")
        if recorded and any(_ours(w) for w in real) and _sha256(init) != recorded:
            raise ForeignPackage(
                f"tf-model-scripts: {init} is not the file this distribution installed "
                f"({'removed' if not os.path.exists(init) else 'written over'}: another "
                f"distribution of the name {name!r} was installed or uninstalled over it); "
                "uninstall that one and run pip install --force-reinstall tf-model-scripts")
        if not any(_ours(w) for w in real):
            origin = spec.origin or (where[0] if where else "?")
            raise ForeignPackage(
                f"tf-model-scripts: the module name {name!r} is taken by {origin}, not this "
                f"distribution's {name} (installed at {_ROOT}): a folder of that name in the "
                "working directory or on PYTHONPATH, or another distribution of that name; "
                "run from another directory, or rename or uninstall it")


def guard() -> None:
    """``check``, as a package's import runs it: from a command line (``python -m rn50``, a
    console script ``tf-...``) the line and exit 2; in Python, the ``ForeignPackage``."""
    try:
        check()
    except ForeignPackage as e:
        argv0 = sys.argv[0] if sys.argv else ""
        if argv0 == "-m" or os.path.basename(argv0).startswith("tf-"):
            sys.stderr.write(f"{e}\n")
            raise SystemExit(2) from None
        raise


guard()


def __getattr__(name):
    """``api`` (``common.api``) on first use: importing this package imports no TensorFlow;
    ``__version__``."""
    if name == "api":
        from common import api
        return api
    if name == "__version__":  # this build's: the release and the commit (version.py)
        from tf_model_scripts.version import this_build
        return this_build()["version"]
    raise AttributeError(f"module 'tf_model_scripts' has no attribute {name!r}")
