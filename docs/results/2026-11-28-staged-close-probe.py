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
