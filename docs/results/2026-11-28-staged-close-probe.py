"""By-hand probe of how a server ends a connection with bytes unread.

circus on 127.0.0.1:8201 and nginx on 127.0.0.1:8301 serve a directory
holding small-01.bin (2 KiB), medium-01.bin (256 KiB) and large.bin
(16 MiB). Each trial sends an HTTP/1.0 GET, alone or followed in the same
write by 300 pipelined requests, waits 0.3 s, then reads to the end.
"""
import socket, time, sys
def trial(port, first, extra=b"", sleep=0.3):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(first + extra)
    time.sleep(sleep)
    got = b""
    try:
        while True:
            d = s.recv(1 << 20)
            if not d: break
            got += d
    except ConnectionResetError:
        return f"RESET after {len(got)} bytes"
    return f"ok {len(got)} bytes"
junk = b"GET /small-02.bin HTTP/1.1\r\nHost: x\r\n\r\n" * 300
for path in ["small-01.bin", "medium-01.bin", "large.bin"]:
    for ex, nm in [(b"", "alone"), (junk, "junk")]:
        for port, name in [(8201, "circus"), (8301, "nginx")]:
            print(path, nm, name, trial(port, f"GET /{path} HTTP/1.0\r\n\r\n".encode(), ex))
