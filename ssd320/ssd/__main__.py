"""``python -m ssd``: ``ssd320/main.py`` where the package is installed (``pip install .``)
rather than run from the checkout; the same start (``common/entry.py``). ``main`` is also the
console script pyproject.toml installs."""
import sys

from common import entry

main = entry.main_of("ssd.task:SSDTask")
# prepare_dataset.py's command, installed as a console script too.
prepare = entry.main_of("ssd.prepare:main")

if __name__ == "__main__":
    sys.exit(main("python -m ssd"))  # what its one-line errors and --help name
