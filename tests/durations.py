"""The seconds each test file took in each stack's suite, read from pytest's JUnit XML, for
conftest.py's scheduling: ``make test`` sends the slowest files to its workers first.

pytest-xdist's ``--dist loadfile`` keeps a file on one worker and hands the files out in
collection order (``--no-loadscope-reorder``; by default it orders them by their number of
tests, which put test_conv2d's 36 quick cases first and a five-minute file last, with the
other worker idle). Longest first is the classic list-scheduling rule for the shortest end.

    make test PYTEST_ARGS=--junitxml=/tmp/pip.xml
    make test-ngc PYTEST_ARGS=--junitxml=/tmp/ngc.xml
    python tests/durations.py pip=/tmp/pip.xml ngc=/tmp/ngc.xml > tests/durations.json

A file missing from the table (a new one) is scheduled as if it took the median file's time.
"""
import json
import os
import statistics
import sys
import xml.etree.ElementTree as ET

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")


def file_seconds(junit_xml: str) -> dict[str, float]:
    """{test file's base name: seconds of its tests (setup, call, teardown)} of one run."""
    seconds: dict[str, float] = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        name = case.get("classname", "").split(".")[-1] + ".py"  # tests.test_x -> test_x.py
        seconds[name] = seconds.get(name, 0.0) + float(case.get("time") or 0)
    return {k: round(v, 1) for k, v in sorted(seconds.items())}


def load(stack: str | None) -> dict[str, float]:
    """The table's seconds for ``stack`` (a stack missing from it: the other's), {} without
    a table."""
    try:
        with open(TABLE) as f:
            table = json.load(f)
    except FileNotFoundError:
        return {}
    return table.get(stack or "pip") or next(iter(table.values()), {})


def longest_first(items, seconds: dict[str, float]):
    """``items`` with the files in decreasing ``seconds`` (ties and unknown files keep their
    collection order), the tests inside a file in their own order."""
    if not seconds:
        return list(items)
    default = statistics.median(seconds.values())
    order: dict[str, int] = {}
    for item in items:
        order.setdefault(item.path.name, len(order))
    return sorted(items, key=lambda item: (-seconds.get(item.path.name, default),
                                           order[item.path.name]))


def main(argv: list[str]) -> int:
    if not argv or any("=" not in a for a in argv):
        sys.stderr.write("usage: python tests/durations.py STACK=JUNIT.xml [...] "
                         "> tests/durations.json\n")
        return 2
    table = {}
    for arg in argv:
        stack, path = arg.split("=", 1)
        table[stack] = file_seconds(path)
    json.dump(table, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
