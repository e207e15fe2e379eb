from pathlib import Path
from typing import Callable, Dict, Optional

class Report:
    path: Path
    protocol: str
    bytes: int
    resumed_bytes: int
    received_bytes: int
    blocks_received: int
    blocks_corrupt: int
    blocks_duplicate: int
    reconnects: int
    restarts: int
    sha256: Optional[str]
    elapsed: float

# Called by circus_client.download, which checks and documents the arguments.
def download(
    url: str,
    path: str,
    *,
    progress: Optional[Callable[[int, Optional[int]], object]] = None,
    plain: bool = False,
    retries: int = 5,
    timeout: float = 30.0,
    limit_rate: Optional[int] = None,
    sha256: Optional[str] = None,
    verify: bool = True,
    ca_file: Optional[str] = None,
    headers: Optional[Dict[str, str]] = None,
) -> Report: ...
