"""What ``pyproject.toml`` cannot say statically: the build's version and its record of the
commit (``tf_model_scripts/version.py``), and the packages and console scripts, derived from
``common/models.py``'s table (a model is named there once: its package, its folder beside
main.py, its commands). Both modules are read by path: nothing of the repository is imported.
``tests/test_layout.py`` and ``tests/test_wheel.py`` read ``TOP_LEVEL``, ``PACKAGES`` and
``SCRIPTS`` from here."""
import importlib.util
import json
import os
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


version = _load("_tf_model_scripts_version", "tf_model_scripts/version.py")
models = _load("_tf_model_scripts_models", "common/models.py")
# Top-level package -> its folder; every package, sub-packages too; console script -> target.
TOP_LEVEL = {**models.SHARED_PACKAGES, **{m.package: m.folder for m in models.MODELS.values()}}
PACKAGES = sorted({p for name, folder in TOP_LEVEL.items()
                   for p in [name, *(f"{name}.{sub}" for sub in find_packages(
                       os.path.join(ROOT, folder)))]})
SCRIPTS = {name: target for m in models.MODELS.values() for name, target in m.scripts.items()}


class BuildWithCommit(build_py):
    """The packages, and ``tf_model_scripts/_build.json``: the commit the wheel was built from
    (a wheel has no git to ask), ``build`` (``version.build_info``'s)."""
    build: dict = {}

    def run(self):
        super().run()
        if not self.dry_run:
            target = os.path.join(self.build_lib, "tf_model_scripts", version.BUILD_FILE)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w", encoding="utf-8") as fh:
                json.dump(self.build, fh)
                fh.write("\n")


if __name__ == "__main__":  # setuptools runs it so; the tests import it for the lists
    BuildWithCommit.build = version.build_info(ROOT)  # git asked here only, not on import
    setup(version=BuildWithCommit.build["version"], packages=PACKAGES,
          package_dir={name: folder for name, folder in TOP_LEVEL.items() if name != folder},
          entry_points={"console_scripts": [f"{n} = {t}" for n, t in sorted(SCRIPTS.items())]},
          cmdclass={"build_py": BuildWithCommit})
