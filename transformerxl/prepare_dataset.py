#!/usr/bin/env python
"""Builds the vocabulary and token streams of a corpus in WikiText-103's layout.

    python prepare_dataset.py /data/wikitext-103 /data/wikitext-103-prepared
"""
import os
import runpy
import sys

# The start every script shares (common/entry.py): one line when the repository is not
# installed or the stack cannot run it, then txl.prepare:main.
ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common", "entry.py")

if __name__ == "__main__":
    sys.exit(runpy.run_path(ENTRY)["run"](__file__, "txl.prepare:main"))
