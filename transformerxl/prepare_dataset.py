#!/usr/bin/env python
"""Builds the vocabulary and token streams of a corpus in WikiText-103's layout.

    python prepare_dataset.py /data/wikitext-103 /data/wikitext-103-prepared
"""
import os
import sys

try:
    from common import versions
except ModuleNotFoundError:  # the repository is not installed in this Python
    print(f"{os.path.basename(__file__)}: error: this repository is not installed; run "
          "`bash scripts/install_deps.sh` (or `pip install --no-deps -e .`) at its root",
          file=sys.stderr)
    sys.exit(2)

versions.require(__file__)  # one line, exit 2, on a stack it cannot use

from txl.prepare import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
