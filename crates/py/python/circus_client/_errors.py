"""The exceptions ``download`` raises, one per kind of failure.

Each carries ``exit_code`` (what ``circus get`` would exit with),
``retry_may_help`` (whether the same call, unchanged, may succeed later) and
``hint`` (what a person can do about it). Network failures and interrupted
downloads keep what arrived: calling ``download`` again resumes.
"""


class CircusError(Exception):
    """A download failed; see the subclass for whose fault it was."""

    exit_code: int = 1
    retry_may_help: bool = False
    hint: str = ""


class UsageError(CircusError, ValueError):
    """An argument that can never work: a bad URL, digest, header or timeout."""


class LocalError(CircusError, OSError):
    """The output or its sidecar files cannot be created, written or renamed."""


class NetworkError(CircusError, ConnectionError):
    """The network or the server failed on every try; calling again resumes."""


class IntegrityError(CircusError):
    """The data did not match its digest, or blocks failed on every try."""


class HTTPStatusError(CircusError):
    """The server answered an HTTP error; ``status`` is its code."""

    status: int = 0


class ProtocolError(CircusError):
    """The server broke the circus protocol; ``plain=True`` may work."""


class CancelledError(CircusError):
    """The download was cancelled (only ever raised as its cause's exception)."""
