"""The build's version and its record of the commit (``tf_model_scripts/version.py``): the
rest of the metadata is ``pyproject.toml``'s."""
import importlib.util
import json
import os

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "_tf_model_scripts_version", os.path.join(ROOT, "tf_model_scripts", "version.py"))
version = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(version)
BUILD = version.build_info(ROOT)


class BuildWithCommit(build_py):
    """The packages, and ``tf_model_scripts/_build.json``: the commit the wheel was built from
    (a wheel has no git to ask)."""

    def run(self):
        super().run()
        if not self.dry_run:
            target = os.path.join(self.build_lib, "tf_model_scripts", version.BUILD_FILE)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w", encoding="utf-8") as fh:
                json.dump(BUILD, fh)
                fh.write("\n")


setup(version=BUILD["version"], cmdclass={"build_py": BuildWithCommit})
