"""Download large files from a circus server, or from any HTTP server.

``download(url, path)`` runs the client of ``circus get``: from a circus
server it takes the file's blocks in whatever order the server sends them,
checks each against the file's BLAKE3 manifest as it arrives and writes it in
place; from any other server it downloads the plain file. An interrupted
download resumes where it stopped (``PATH.circus-part`` and
``PATH.circus-state`` sit beside ``PATH`` until then), and ``PATH`` appears
only once the whole file has been checked against every digest known.

    import circus_client

    report = circus_client.download(
        "http://mirror.example:8080/weights/model.safetensors",
        "model.safetensors",
        progress=lambda done, total: print(f"{done}/{total}", end="\\r"),
    )
    print(report.bytes, report.protocol, report.sha256)

The download runs outside the GIL; other Python threads go on meanwhile.
Its notes (a resume, a start-over, a reconnect) are INFO records of the
``circus_client`` logger.
"""

import os
from typing import Callable, Mapping, Optional, Union

from . import _native
from ._errors import (
    CircusError,
    HTTPStatusError,
    IntegrityError,
    LocalError,
    NetworkError,
    ProtocolError,
    UsageError,
)
from ._native import Report

__all__ = [
    "download",
    "Report",
    "CircusError",
    "UsageError",
    "LocalError",
    "NetworkError",
    "IntegrityError",
    "HTTPStatusError",
    "ProtocolError",
]

PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def download(
    url: str,
    path: PathArg,
    *,
    progress: Optional[Callable[[int, Optional[int]], object]] = None,
    plain: bool = False,
    retries: int = 5,
    timeout: float = 30.0,
    limit_rate: Optional[int] = None,
    sha256: Optional[str] = None,
    verify: bool = True,
    ca_file: Optional[PathArg] = None,
    headers: Optional[Mapping[str, str]] = None,
) -> Report:
    """Downloads ``url`` to ``path``; returns a ``Report`` once the file is
    complete, checked and in place. Blocks the calling thread only: the GIL
    is released while the download runs.

    ``progress(done, total)`` is called on this thread at most every 0.1 s
    while bytes arrive, and once more at the end if anything changed;
    ``total`` is None when the server does not say. An exception it raises,
    or Ctrl-C, stops the download and is raised here; what arrived is kept
    and the same call later resumes (if the data was already complete, the
    next call only checks it). An exception from the last call, made after
    the file is in place, is raised too; the file stays.

    Options: ``plain`` downloads plain HTTP only, even from a circus server;
    ``retries`` is how many failed attempts in a row, without progress, end
    the download; ``timeout`` is the seconds of silence after which an
    attempt fails; ``limit_rate`` caps bytes per second; ``sha256`` is the
    file's digest as you know it (hex, ``sha256:HEX`` or
    ``sha-256=:BASE64:``), always checked; ``verify`` also checks the digests
    the server sends (blocks of a native download are checked regardless);
    ``ca_file`` makes https trust only that file's CA certificates (PEM);
    ``headers`` go with every request (an ``Authorization``), non-ASCII
    values as UTF-8.

    Raises subclasses of ``CircusError``: ``UsageError`` (a ValueError),
    ``LocalError`` (an OSError), ``NetworkError`` (a ConnectionError),
    ``IntegrityError``, ``HTTPStatusError`` and ``ProtocolError``.
    """
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable, not {type(progress).__name__}")
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries < 1 << 32:
        raise _usage(f"retries: {retries!r} is not a count from 0")
    if limit_rate is not None and (
        isinstance(limit_rate, bool) or not isinstance(limit_rate, int) or not 0 < limit_rate < 1 << 64
    ):
        raise _usage(f"limit_rate: {limit_rate!r} is not a positive number of bytes per second (None: no limit)")
    return _native.download(
        url,
        os.fsdecode(path),
        progress=progress,
        plain=plain,
        retries=retries,
        timeout=timeout,
        limit_rate=limit_rate,
        sha256=sha256,
        verify=verify,
        ca_file=None if ca_file is None else os.fsdecode(ca_file),
        headers=None if headers is None else dict(headers),
    )


def _usage(message: str) -> UsageError:
    e = UsageError(message)
    e.exit_code, e.retry_may_help, e.hint = 1, False, "check the URL and the options"
    return e
