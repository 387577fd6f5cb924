"""Where every ``main.py`` and ``prepare_dataset.py`` starts: run by path
(``runpy.run_path``), so that it puts its own checkout first on the import path before anything
of ``common`` is imported; then the stack check (``versions.require``), then the script's
target: a ``Task`` class for ``main.py`` (run by ``common.runner.main``), a function
for ``prepare_dataset.py``.

    sys.exit(runpy.run_path(ENTRY)["run"](__file__, "rn50.task:ResNetTask"))

``main.py --help`` is answered from the model's config module (``<package>.config``, what its
Task's ``config`` is: its ``define_flags`` and ``FLAG_DEFAULTS``) without importing
TensorFlow, and a command line the flags refuse (``common.flags.parse``: an unknown flag, a
value out of range, flags that contradict each other) gets its one line and exit 2 from there
too, in a second rather than after TensorFlow's start-up. Otherwise TensorFlow is imported and
its devices found with its start-up lines filtered (``common.runtime.quiet_start``): a line that
means nothing on a healthy machine is not shown, any other is.
"""
import importlib
import os
import sys

# The checkout this file belongs to: its common/ and models run, whichever checkout an
# editable install (``pip install -e``) points the environment at, so two clones side by side
# each run their own code (README, "Where it runs").
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def own_checkout_first() -> None:
    """This checkout's root, then the folders of its model packages (``common.models``' table),
    on ``sys.path`` right after the script's own folder, ahead of any installed copy: SSD320
    builds its trunk from rn50, which came from wherever the editable install pointed (another
    clone, or one since deleted: "No module named 'rn50'")."""
    if sys.path[1:2] != [ROOT]:
        sys.path.insert(1, ROOT)
    from common.models import MODELS  # this checkout's table: its root now comes first
    folders = [os.path.join(ROOT, m.directory) for m in MODELS.values()]
    if sys.path[2:2 + len(folders)] != folders:
        sys.path[2:2] = folders


def run(script: str, target: str) -> int:
    own_checkout_first()
    from common import versions
    from common.runtime import quiet_start, start_policy
    module = target.split(":")[0]
    if module.endswith(".task"):  # --help, or a command line the flags refuse: no TensorFlow
        answered = _parse_early(module.removesuffix(".task") + ".config")
        if answered is not None:
            return answered
    from common.runtime import graceful_stop
    graceful_stop.install()  # a stop signal from here on ends the process cleanly, one line
    try:
        with quiet_start.filtered_stderr(), start_policy.without_optional_imports():
            versions.require(script)  # one line, exit 2, on a stack it cannot use
            obj = getattr(importlib.import_module(module), target.split(":")[1])
            from common.runtime import devices
            devices.physical_gpus()  # where CUDA is initialised, and says so
        start_policy.settle_imports()
    except graceful_stop.Interrupted as e:
        from common.errors import say
        say(f"{os.path.basename(script)}: {e.signame} while starting: stopped before anything "
            "was written")
        return 0
    if isinstance(obj, type):  # a Task
        from common.runner import main
        return main(obj)
    return obj()


def commands(package: str):
    """A model package's ``main`` and ``prepare`` (its ``__main__``'s, and the console scripts
    ``tf-MODEL`` and ``tf-MODEL-prepare``), from ``common/models.py``'s table: its Task and its
    ``prepare`` module."""
    from common.models import of_package
    return main_of(of_package(package).task), main_of(f"{package}.prepare:main")


def main_of(target: str):
    """A model package's ``main`` (``python -m PACKAGE``, and the wheel's console scripts:
    setup.py): ``run`` of ``target``, its errors and ``--help``
    naming the command as it was started (``prog``, else the script's name)."""
    def main(prog: str | None = None) -> int:
        sys.argv[0] = prog or os.path.basename(sys.argv[0])
        return run(sys.argv[0], target)
    return main


def _parse_early(flags_module: str) -> int | None:
    """The model's flags (its config module: ``define_flags``, ``FLAG_DEFAULTS``) parse the
    command line before TensorFlow: 0 once ``--help`` printed every flag with its default; 2,
    with ``common.runner.main``'s line, where they refuse it (``UsageError``); None where they
    take it, or where what they find wrong is in the data (``DataError``: the run says it,
    naming the rank where there are several)."""
    try:
        from common import flags
        config = importlib.import_module(flags_module)
    except ImportError:  # a stack without absl: the stack check (versions.require) says so
        return None
    from common.errors import DataError, UsageError, say
    try:
        flags.parse(flags.build(config.define_flags, config.FLAG_DEFAULTS), sys.argv)
    except SystemExit as e:  # parse prints the help and exits 0
        return int(e.code or 0)
    except UsageError as e:
        say(f"{os.path.basename(sys.argv[0]) if sys.argv else 'main.py'}: error: {e}")
        return 2
    except DataError:
        pass
    return None
