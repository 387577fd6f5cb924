"""Where every ``main.py`` and ``prepare_dataset.py`` starts: run by path
(``runpy.run_path``), so that it can say in one line that the repository is not installed, which
an import of ``common`` could not; then the stack check (``versions.require``), then the
script's target: a ``Task`` class for ``main.py`` (run by ``common.runner.main``), a function
for ``prepare_dataset.py``.

    sys.exit(runpy.run_path(ENTRY)["run"](__file__, "rn50.task:ResNetTask"))
"""
import importlib
import os
import sys


def run(script: str, target: str) -> int:
    try:
        from common import versions
    except ModuleNotFoundError:  # the repository is not installed in this Python
        print(f"{os.path.basename(script)}: error: this repository is not installed; run "
              "`bash scripts/install_deps.sh` (or `pip install --no-deps -e .`) at its root",
              file=sys.stderr)
        return 2
    versions.require(script)  # one line, exit 2, on a stack it cannot use
    module, name = target.split(":")
    obj = getattr(importlib.import_module(module), name)
    if isinstance(obj, type):  # a Task
        from common.runner import main
        return main(obj)
    return obj()
