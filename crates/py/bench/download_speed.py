#!/usr/bin/env python3
"""The Python package against `circus get`: both download the same file from
one `circus serve` on 127.0.0.1, alternating, for a number of rounds; every
download is checked byte for byte (SHA-256) against the source.

    python crates/py/bench/download_speed.py [--size 1GiB] [--rounds 5]

Prints a JSON line and a table: the median rate of each, and their ratio
(the target is 0.9: the wheel downloads at least 90% as fast as the binary).
The file is downloaded once before the rounds so both read it from the
server's memory. Needs the wheel installed and a release build of circus.
"""

import argparse
import hashlib
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import circus_client

ROOT = pathlib.Path(__file__).resolve().parents[3]
TARGET = 0.9
UNITS = {"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def size_arg(text: str) -> int:
    for unit in ("GiB", "MiB", "KiB", ""):
        if text.endswith(unit):
            number = text[: len(text) - len(unit)] if unit else text
            try:
                return int(float(number) * UNITS[unit])
            except ValueError:
                break
    raise argparse.ArgumentTypeError(f"{text!r}: a size such as 1GiB, 256MiB or 1000")


def sha256_of(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def write_random(path, size) -> str:
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            chunk = os.urandom(min(left, 1 << 22))
            f.write(chunk)
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def serve(binary, directory):
    proc = subprocess.Popen(
        [binary, "serve", str(directory), "--listen", "127.0.0.1:0", "--admin-listen", "off"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    for line in proc.stdout:
        if line.startswith("circus listening on "):
            return proc, line.split(" on ", 1)[1].strip()
    raise SystemExit(f"circus serve exited with {proc.wait()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--circus", default=str(ROOT / "target/release/circus"), help="the circus binary")
    ap.add_argument("--size", type=size_arg, default=1 << 30, help="file size (default 1GiB)")
    ap.add_argument("--rounds", type=int, default=5, help="downloads by each (default 5)")
    ap.add_argument("--work", help="directory for the file and the downloads (default: a temporary one)")
    args = ap.parse_args()
    if not os.access(args.circus, os.X_OK):
        raise SystemExit(f"{args.circus}: no circus binary; cargo build --release -p circus")

    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="circus-py-bench-"))
    (work / "served").mkdir(parents=True, exist_ok=True)
    source = work / "served" / "file.bin"
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    log(f"writing {args.size} random bytes to {source}")
    want = write_random(source, args.size)
    server, base = serve(args.circus, work / "served")
    url = f"{base}/file.bin"
    times = {"circus get": [], "python": []}
    try:

        def by_get(out):
            subprocess.run([args.circus, "get", "-q", url, "-o", str(out)], check=True)

        def by_python(out):
            circus_client.download(url, out)

        runners = {"circus get": by_get, "python": by_python}
        log("warming the server's memory with one download")
        by_get(work / "warm")
        os.remove(work / "warm")
        for r in range(args.rounds):
            order = ["circus get", "python"] if r % 2 == 0 else ["python", "circus get"]
            for name in order:
                out = work / f"out-{r}"
                started = time.perf_counter()
                runners[name](out)
                took = time.perf_counter() - started
                if sha256_of(out) != want:
                    raise SystemExit(f"{name}: round {r + 1} downloaded the wrong bytes")
                os.remove(out)
                times[name].append(took)
                log(f"round {r + 1}/{args.rounds}: {name:<10} {args.size / took / 1e6:8.1f} MB/s ({took:.2f} s), byte-exact")
    finally:
        server.terminate()
        server.wait()
        source.unlink()

    rate = {k: args.size / statistics.median(v) for k, v in times.items()}
    ratio = rate["python"] / rate["circus get"]
    result = {
        "benchmark": "python-download",
        "size_bytes": args.size,
        "rounds": args.rounds,
        "seconds": times,
        "median_bytes_per_s": rate,
        "ratio": ratio,
        "target": TARGET,
        "met": ratio >= TARGET,
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, {platform.platform()}",
        "python": platform.python_version(),
    }
    print(json.dumps(result))
    print(f"\n{'client':<12}{'median MB/s':>14}{'best MB/s':>12}")
    for name, ts in times.items():
        print(f"{name:<12}{rate[name] / 1e6:>14.1f}{args.size / min(ts) / 1e6:>12.1f}")
    print(f"\nratio python / circus get: {ratio:.3f} (target >= {TARGET}: {'met' if ratio >= TARGET else 'NOT met'})")


if __name__ == "__main__":
    main()
