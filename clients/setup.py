"""The clients' version: the repository's build, as the training distribution's ``setup.py``
(read here by path) gives it; the rest is ``pyproject.toml``'s."""
import importlib.util
import os

from setuptools import setup

_spec = importlib.util.spec_from_file_location("_tf_model_scripts_setup", os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py"))
root = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(root)  # its setup() runs only as a script

setup(version=root.version.build_info(root.ROOT)["version"])
