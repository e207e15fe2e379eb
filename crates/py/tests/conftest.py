"""Fixtures: a real `circus serve` child process on 127.0.0.1 serving real
files, and the `circus` binary it runs (CIRCUS_BIN, else the workspace's
target/release or target/debug build). A missing binary fails the tests; it
never skips them."""

import hashlib
import os
import pathlib
import subprocess
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def circus_binary() -> pathlib.Path:
    given = os.environ.get("CIRCUS_BIN")
    candidates = [pathlib.Path(given)] if given else [ROOT / "target/release/circus", ROOT / "target/debug/circus"]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    pytest.fail(f"no circus binary at {[str(c) for c in candidates]}: run `cargo build --release -p circus` or set CIRCUS_BIN")


class Server:
    """`circus serve DIR` on an ephemeral port; stopped by PID."""

    def __init__(self, directory: pathlib.Path, *args: str):
        self.dir = directory
        self.proc = subprocess.Popen(
            [str(circus_binary()), "serve", str(directory), "--listen", "127.0.0.1:0", "--admin-listen", "off", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self._first_line_with("circus listening on ")
        self.base = line.split("circus listening on ", 1)[1].strip()
        # Keep draining stdout so the server never blocks on a full pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def _first_line_with(self, marker: str) -> str:
        timer = threading.Timer(30, self.proc.kill)
        timer.start()
        try:
            for line in self.proc.stdout:
                if marker in line:
                    return line
        finally:
            timer.cancel()
        raise RuntimeError(f"circus serve exited ({self.proc.wait()}): {self.proc.stderr.read()}")

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def write_random(path: pathlib.Path, size: int) -> str:
    """Writes `size` random bytes; returns their SHA-256 (hex)."""
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left > 0:
            chunk = os.urandom(min(left, 1 << 20))
            f.write(chunk)
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """A server with `big.bin` (24 MiB and a short tail) and `small.txt`."""
    root = tmp_path_factory.mktemp("served")
    files = {
        "big.bin": write_random(root / "big.bin", (24 << 20) + 12345),
        "small.txt": write_random(root / "small.txt", 1000),
    }
    server = Server(root)
    server.sha256 = files
    yield server
    server.stop()


@pytest.fixture
def out(tmp_path):
    return tmp_path / "out"


def sha256_of(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def leftovers(path: pathlib.Path):
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name + "."))

