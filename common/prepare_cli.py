"""The command line every model's ``prepare_dataset.py`` shares: argparse, then one line on
stderr and exit code 1 for data it cannot prepare (``DataError``), never a traceback."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable

from common.errors import DataError


def add_shards(p: argparse.ArgumentParser, train: int, val: int) -> None:
    """``--train_shards`` and ``--val_shards``, with the model's defaults."""
    p.add_argument("--train_shards", type=int, default=train)
    p.add_argument("--val_shards", type=int, default=val)


def main(doc: str, arguments: Callable[[argparse.ArgumentParser], None],
         prepare: Callable[[argparse.Namespace], object],
         argv: Iterable[str] | None = None) -> int:
    """Parses ``argv`` with the model's ``arguments`` and runs its ``prepare``; ``doc``'s first
    paragraph is the help text."""
    p = argparse.ArgumentParser(prog="prepare_dataset.py", description=doc.split("\n\n")[0])
    arguments(p)
    args = p.parse_args(argv)
    try:
        prepare(args)
    except DataError as e:
        print(f"prepare_dataset.py: error: {e}", file=sys.stderr)
        return 1
    return 0
