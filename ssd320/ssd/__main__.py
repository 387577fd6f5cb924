"""``python -m ssd``: ``ssd320/main.py`` where the package is installed (``pip install .``)
rather than run from the checkout; the same start (``common/entry.py``). ``main`` is also the
console script the wheel installs (setup.py, from common/models.py)."""
import sys

from common import entry

# The model's main.py and prepare_dataset.py (common/models.py's table names them), also its
# console scripts.
main, prepare = entry.commands(__package__)

if __name__ == "__main__":
    sys.exit(main(f"python -m {__package__}"))  # what its one-line errors and --help name
