#!/usr/bin/env python
"""Builds the vocabulary and token streams of a corpus in WikiText-103's layout.

    python prepare_dataset.py /data/wikitext-103 /data/wikitext-103-prepared
"""
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.dirname(_here)]  # txl/ and the repository's common/

from common import versions  # noqa: E402

versions.require(os.path.basename(__file__))  # one line, exit 2, on a stack it cannot use

from txl.prepare import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
