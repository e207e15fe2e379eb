"""Download large files from a circus server, or from any HTTP server.

``download(url, path)`` runs the client of ``circus get``: from a circus
server it takes the file's blocks in whatever order the server sends them,
checks each against the file's BLAKE3 manifest as it arrives and writes it in
place; from any other server it downloads the plain file. An interrupted
download resumes where it stopped (``PATH.circus-part`` and
``PATH.circus-state`` sit beside ``PATH`` until then), and ``PATH`` appears
only once the whole file has been verified.

    import circus_client

    report = circus_client.download(
        "http://mirror.example:8080/weights/model.safetensors",
        "model.safetensors",
        progress=lambda done, total: print(f"{done}/{total}", end="\\r"),
    )
    print(report.bytes, report.protocol, report.sha256)

The download runs outside the GIL; other Python threads go on meanwhile.
"""

from ._errors import (
    CircusError,
    HTTPStatusError,
    IntegrityError,
    LocalError,
    NetworkError,
    ProtocolError,
    UsageError,
)
from ._native import Report, download

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
