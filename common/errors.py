"""Errors that end a run with one actionable line instead of a traceback."""
import re
import sys

# TensorFlow's wrapping around the cause: function-node prefixes, op suffixes, node lists and
# tf.data's "Error in user-defined function ..." preamble.
_TF_NOISE = re.compile(r"\{\{[^}]*\}\}|\[Op:[^\]]*\]|\s*\[\[\{\{node [^\]]*\]\]"
                       r"|Error in user-defined function passed to \S+ transformation with "
                       r"iterator: \S+: |\s+name:\s*$", re.MULTILINE)


class UsageError(Exception):
    """A wrong flag, a flag combination that cannot work, or a bad environment variable."""


class DataError(Exception):
    """Missing, empty or corrupt input data."""


class TrainingError(Exception):
    """Training cannot go on (for example a non-finite loss); the last checkpoint is kept."""


# What a function's error raised in eager code puts before its cause: "Graph execution error:",
# "Detected at node X defined at (most recent call last):", then the traceback (indented) or
# "<stack traces unavailable>".
_TF_PREAMBLE = ("Graph execution error:", "Detected at node ", "<stack traces unavailable>")


def one_line(message: str) -> str:
    """The first meaningful line of a TensorFlow error message, wrapping stripped (the graph
    execution preamble and its traceback too) and an assertion's data unwrapped ("assertion
    failed: [label 11 is ...]" -> "label 11 is ...")."""
    message = re.sub(r"assertion failed: \[(.*?)\]", r"\1", _TF_NOISE.sub("", message))
    lines = [ln for ln in message.splitlines() if ln.strip()]
    if lines and lines[0].startswith(_TF_PREAMBLE[0]):
        lines = [ln for ln in lines if not ln[0].isspace() and not ln.startswith(_TF_PREAMBLE)]
    lines = [ln.strip() for ln in lines]
    return lines[0] if lines else message.strip()[:300]


def say(line: str, stream=None) -> None:
    """``line`` and its newline on stderr (or ``stream``) in one write. ``print`` writes the two
    apart (stderr writes through), so the ranks of one job, whose stderr mpirun merges, ran one
    rank's error into the next rank's line."""
    stream = stream or sys.stderr
    stream.write(line + "\n")
    stream.flush()


def reported(tool: str, body, codes: dict) -> int:
    """Runs a command-line tool's ``body()`` and returns its exit code. An error of a class in
    ``codes`` (the first that matches) becomes one line on stderr, ``<tool>: error: <message>``,
    and that class's exit code, so every tool of the repository fails the same way."""
    try:
        return body()
    except tuple(codes) as e:
        code = next(c for cls, c in codes.items() if isinstance(e, cls))
        say(f"{tool}: error: {_message(e)}")
        return code


def _message(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    return str(e)
