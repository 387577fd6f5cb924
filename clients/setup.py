"""The clients' version: the repository's build (``../tf_model_scripts/version.py``), as the
training distribution's ``setup.py`` gives it; the rest is ``pyproject.toml``'s."""
import importlib.util
import os

from setuptools import setup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "_tf_model_scripts_version", os.path.join(ROOT, "tf_model_scripts", "version.py"))
version = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(version)

setup(version=version.build_info(ROOT)["version"])
