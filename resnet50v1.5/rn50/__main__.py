"""``python -m rn50``: ``resnet50v1.5/main.py`` where the package is installed (``pip install .``)
rather than run from the checkout; the same start (``common/entry.py``). ``main`` is also the
console script the wheel installs (setup.py, from common/models.py)."""
import sys

from common import entry

# The model's main.py and prepare_dataset.py (common/models.py's table names them), also its
# console scripts.
main, prepare = entry.commands(__package__)
# import_weights.py's command, installed as a console script too.
import_weights = entry.main_of("rn50.pretrained:main")

if __name__ == "__main__":
    sys.exit(main(f"python -m {__package__}"))  # what its one-line errors and --help name
