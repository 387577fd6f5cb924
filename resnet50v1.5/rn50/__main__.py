"""``python -m rn50``: ``resnet50v1.5/main.py`` where the package is installed (``pip install .``)
rather than run from the checkout; the same start (``common/entry.py``)."""
import sys

from common import entry

if __name__ == "__main__":
    sys.argv[0] = "python -m rn50"  # what its one-line errors and --help name
    sys.exit(entry.run(sys.argv[0], "rn50.task:ResNetTask"))
