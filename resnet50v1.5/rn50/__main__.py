"""``python -m rn50``: ``resnet50v1.5/main.py`` where the package is installed (``pip install .``)
rather than run from the checkout; the same start (``common/entry.py``). ``main`` is also the
console script pyproject.toml installs."""
import sys

from common import entry

main = entry.main_of("rn50.task:ResNetTask")
# prepare_dataset.py's command, installed as a console script too.
prepare = entry.main_of("rn50.prepare:main")
# import_weights.py's command, installed as a console script too.
import_weights = entry.main_of("rn50.pretrained:main")

if __name__ == "__main__":
    sys.exit(main("python -m rn50"))  # what its one-line errors and --help name
