"""circus_client.download against a real `circus serve` (and a plain Python
HTTP server) on 127.0.0.1, writing real files."""

import http.server
import logging
import os
import pathlib
import threading
import time
import _thread

import pytest

import circus_client
from conftest import leftovers, sha256_of

BIG = "big.bin"


def test_native_download_is_byte_exact_and_verified(served, out):
    report = circus_client.download(served.url(BIG), out)
    assert sha256_of(out) == served.sha256[BIG]
    assert report.protocol == "native"
    assert report.bytes == os.path.getsize(served.dir / BIG)
    assert report.sha256 == served.sha256[BIG], "the manifest's SHA-256 was checked"
    assert (report.resumed_bytes, report.reconnects, report.blocks_corrupt) == (0, 0, 0)
    assert pathlib.Path(report.path) == out
    assert report.elapsed > 0
    assert leftovers(out) == []
    assert "native" in repr(report)


def test_plain_mode_from_a_circus_server(served, out):
    report = circus_client.download(served.url(BIG), str(out), plain=True)
    assert sha256_of(out) == served.sha256[BIG]
    assert report.protocol == "plain"
    assert report.blocks_received == 0


def test_progress_is_reported_on_the_calling_thread_up_to_the_total(served, out):
    calls = []
    caller = threading.get_ident()

    def progress(done, total):
        calls.append((done, total, threading.get_ident()))

    # 24 MiB at 32 MiB/s: about 0.75 s, several reports.
    circus_client.download(served.url(BIG), out, progress=progress, limit_rate=32 << 20)
    size = os.path.getsize(served.dir / BIG)
    assert len(calls) >= 3, calls
    assert all(thread == caller for _, _, thread in calls)
    assert all(total == size for _, total, _ in calls), calls
    dones = [done for done, _, _ in calls]
    assert dones == sorted(dones) and dones[-1] == size, dones


class Stop(Exception):
    pass


def test_an_exception_in_the_progress_callback_stops_the_download_and_the_next_call_resumes(served, out):
    def progress(done, total):
        # Past the first checkpoint (a second's worth), so there is progress to keep.
        if done >= 6 << 20:
            raise Stop(done)

    with pytest.raises(Stop):
        circus_client.download(served.url(BIG), out, progress=progress, limit_rate=4 << 20)
    assert not out.exists(), "nothing is installed until the whole file is verified"
    assert leftovers(out) == ["out.circus-part", "out.circus-state"]

    report = circus_client.download(served.url(BIG), out)
    assert sha256_of(out) == served.sha256[BIG]
    assert report.resumed_bytes >= 4 << 20, report
    # What the state file claimed was on disk: no start-over, only the rest fetched.
    assert report.restarts == 0, report
    assert report.blocks_received * (64 << 10) < report.bytes - (4 << 20), report
    assert leftovers(out) == []


def test_notes_go_to_the_logging_module_on_the_calling_thread(served, out, caplog):
    def progress(done, total):
        if done >= 6 << 20:
            raise Stop(done)

    with pytest.raises(Stop):
        circus_client.download(served.url(BIG), out, progress=progress, limit_rate=4 << 20)
    with caplog.at_level(logging.INFO, logger="circus_client"):
        circus_client.download(served.url(BIG), out)
    notes = [r for r in caplog.records if r.name == "circus_client"]
    resumed = [r for r in notes if r.getMessage().startswith("resuming: ")]
    assert resumed, [r.getMessage() for r in caplog.records]
    assert resumed[0].levelno == logging.INFO
    assert resumed[0].thread == threading.get_ident(), "logged by the thread that called download"


def test_a_note_with_percent_signs_is_logged_as_it_is(served, out, caplog):
    """A note quotes URLs, whose escapes look like format directives."""

    def progress(done, total):
        if done >= 6 << 20:
            raise Stop(done)

    odd = served.url(BIG) + "?v=%25d%s"
    with pytest.raises(Stop):
        circus_client.download(odd, out, progress=progress, limit_rate=4 << 20)
    with caplog.at_level(logging.INFO, logger="circus_client"):
        circus_client.download(served.url(BIG), out)
    messages = [r.getMessage() for r in caplog.records if r.name == "circus_client"]
    assert any(odd in m and "starting over" in m for m in messages), messages
    assert sha256_of(out) == served.sha256[BIG]


def test_ctrl_c_stops_the_download_keeps_its_progress_and_raises_keyboard_interrupt(served, out):
    timer = threading.Timer(1.6, _thread.interrupt_main)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            circus_client.download(served.url(BIG), out, limit_rate=4 << 20)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 4, "taken within a poll, not at the end of the download"
    assert leftovers(out) == ["out.circus-part", "out.circus-state"]
    report = circus_client.download(served.url(BIG), out)
    assert report.resumed_bytes > 0 and sha256_of(out) == served.sha256[BIG]
    assert report.restarts == 0, report


def test_other_threads_run_while_a_download_runs(served, out):
    """The GIL is released: a Python thread keeps counting during the download."""
    counted = 0
    stop = threading.Event()

    def count():
        nonlocal counted
        while not stop.is_set():
            counted += 1

    # Baseline: how far the counter gets in 0.5 s with nothing else running.
    t = threading.Thread(target=count)
    t.start()
    time.sleep(0.5)
    stop.set()
    t.join()
    alone, counted = counted, 0
    stop.clear()

    t = threading.Thread(target=count)
    t.start()
    started = time.monotonic()
    circus_client.download(served.url(BIG), out, limit_rate=24 << 20)
    took = time.monotonic() - started
    stop.set()
    t.join()
    # Were the GIL held, the counter would barely move in the download's second.
    assert counted > 0.5 * alone * (took / 0.5), (counted, alone, took)


def test_a_wrong_digest_is_an_integrity_error_and_installs_nothing(served, out):
    with pytest.raises(circus_client.IntegrityError) as raised:
        circus_client.download(served.url(BIG), out, sha256="0" * 64)
    assert raised.value.exit_code == 3
    assert not out.exists()
    assert leftovers(out) == [], "wrong data is not kept as progress"


def test_the_right_digest_is_accepted(served, out):
    report = circus_client.download(served.url(BIG), out, sha256=served.sha256[BIG])
    assert report.sha256 == served.sha256[BIG]


def test_a_missing_file_is_an_http_status_error(served, out):
    with pytest.raises(circus_client.HTTPStatusError) as raised:
        circus_client.download(served.url("nope.bin"), out)
    e = raised.value
    assert (e.status, e.exit_code, e.retry_may_help) == (404, 4, False)
    assert "404" in str(e) and e.hint
    assert isinstance(e, circus_client.CircusError)
    assert leftovers(out) == [] and not out.exists()


def test_a_refused_connection_is_a_network_error(out):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(circus_client.NetworkError) as raised:
        circus_client.download(f"http://127.0.0.1:{port}/x", out, retries=0)
    assert raised.value.exit_code == 2 and raised.value.retry_may_help
    assert isinstance(raised.value, ConnectionError)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout": 0},
        {"timeout": float("nan")},
        {"limit_rate": 0},
        {"limit_rate": -1},
        {"limit_rate": 1 << 64},
        {"retries": -1},
        {"sha256": "not a digest"},
        {"headers": {"Bad Name": "x"}},
        {"headers": {"X-Injected": "a\r\nb: c"}},
    ],
)
def test_arguments_that_can_never_work_are_usage_errors(served, out, kwargs):
    with pytest.raises(circus_client.UsageError) as raised:
        circus_client.download(served.url(BIG), out, **kwargs)
    assert isinstance(raised.value, ValueError)
    assert (raised.value.exit_code, raised.value.retry_may_help) == (1, False)
    assert raised.value.hint
    assert not out.exists() and leftovers(out) == []


def test_an_empty_path_is_a_usage_error_and_writes_nothing(served, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(circus_client.UsageError):
        circus_client.download(served.url("small.txt"), "")
    assert list(tmp_path.iterdir()) == []


def test_a_progress_that_is_not_callable_is_refused_before_anything_starts(served, out):
    with pytest.raises(TypeError):
        circus_client.download(served.url("small.txt"), out, progress=5)
    assert not out.exists() and leftovers(out) == []


def test_bytes_paths_and_any_mapping_of_headers_are_taken(served, tmp_path):
    import types

    out = os.fsencode(tmp_path / "bytes-out")
    report = circus_client.download(served.url("small.txt"), out, headers=types.MappingProxyType({"X-A": "1"}))
    assert sha256_of(out) == served.sha256["small.txt"] and report.bytes == 1000


def test_a_second_download_to_the_same_path_meanwhile_is_a_local_error(served, out):
    first = {}

    def run():
        first["report"] = circus_client.download(served.url(BIG), out, limit_rate=32 << 20)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    try:
        with pytest.raises(circus_client.LocalError) as raised:
            circus_client.download(served.url(BIG), out)
    finally:
        t.join(timeout=30)
    assert isinstance(raised.value, OSError) and raised.value.retry_may_help
    assert "another download" in str(raised.value)
    assert first["report"].bytes == os.path.getsize(served.dir / BIG)
    assert sha256_of(out) == served.sha256[BIG]


def test_a_bad_url_is_a_usage_error(out):
    with pytest.raises(circus_client.UsageError):
        circus_client.download("ftp://example.invalid/x", out)


def test_a_plain_http_server_gets_a_plain_download_with_the_callers_headers(out):
    payload = os.urandom((3 << 20) + 7)
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/file"
        report = circus_client.download(url, out, headers={"Authorization": "Bearer t0ken"})
    finally:
        server.shutdown()
        server.server_close()
    assert out.read_bytes() == payload
    assert report.protocol == "plain"
    assert seen == ["Bearer t0ken"]
