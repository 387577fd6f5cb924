#!/usr/bin/env python
"""Builds the vocabulary and token streams of a corpus in WikiText-103's layout.

    python prepare_dataset.py /data/wikitext-103 /data/wikitext-103-prepared
"""
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.dirname(_here)]  # txl/ and the repository's common/

from txl.prepare import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
