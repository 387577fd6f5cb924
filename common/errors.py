"""Errors that end a run with one actionable line instead of a traceback."""
import re

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


def one_line(message: str) -> str:
    """The first meaningful line of a TensorFlow error message, wrapping stripped and an
    assertion's data unwrapped ("assertion failed: [label 11 is ...]" -> "label 11 is ...")."""
    message = re.sub(r"assertion failed: \[(.*?)\]", r"\1", _TF_NOISE.sub("", message))
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    return lines[0] if lines else message.strip()[:300]
