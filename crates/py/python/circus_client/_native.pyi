import os
from pathlib import Path
from typing import Callable, Mapping, Optional, Union

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

def download(
    url: str,
    path: Union[str, "os.PathLike[str]"],
    *,
    progress: Optional[Callable[[int, Optional[int]], object]] = None,
    plain: bool = False,
    retries: int = 5,
    timeout: float = 30.0,
    limit_rate: Optional[int] = None,
    sha256: Optional[str] = None,
    verify: bool = True,
    ca_file: Optional[Union[str, "os.PathLike[str]"]] = None,
    headers: Optional[Mapping[str, str]] = None,
) -> Report: ...
