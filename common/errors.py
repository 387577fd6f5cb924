"""Errors that end a run with one actionable line instead of a traceback."""


class UsageError(Exception):
    """A wrong flag, a flag combination that cannot work, or a bad environment variable."""


class DataError(Exception):
    """Missing, empty or corrupt input data."""


class TrainingError(Exception):
    """Training cannot go on (for example a non-finite loss); the last checkpoint is kept."""
