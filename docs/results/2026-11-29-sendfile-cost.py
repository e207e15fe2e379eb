"""The sender's CPU per response body over loopback: written from the heap,
or sent with sendfile from a memfd, a file on a tmpfs, or an ordinary file.

    python3 2026-11-29-sendfile-cost.py heap|memfd|file|tmpfs [SIZE] [DIR]

DIR is where `file` and `tmpfs` put their file (for `tmpfs`, a tmpfs
mounted huge=always, e.g. in `unshare -Urm`). A child process reads
everything; the parent's process time per body is printed."""
import os, socket, sys, time

mode = sys.argv[1]
size = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
where = sys.argv[3] if len(sys.argv) > 3 else "/tmp"
count = int(3e9 // size)
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
reader = os.fork()
if reader == 0:
    conn = socket.create_connection(listener.getsockname())
    buf = memoryview(bytearray(1 << 20))
    got = 0
    while got < count * size:
        got += conn.recv_into(buf)
    os._exit(0)
sock, _ = listener.accept()
data = os.urandom(size)
if mode == "memfd":
    fd = os.memfd_create("body")
    os.write(fd, data)
elif mode in ("file", "tmpfs"):
    path = os.path.join(where, "sendfile-cost.bin")
    with open(path, "wb") as f:
        f.write(data)
    fd = os.open(path, os.O_RDONLY)
cpu, wall = time.process_time(), time.time()
for _ in range(count):
    if mode == "heap":
        sock.sendall(data)
    else:
        off = 0
        while off < size:
            off += os.sendfile(sock.fileno(), fd, off, size - off)
cpu, wall = time.process_time() - cpu, time.time() - wall
os.waitpid(reader, 0)
print(f"{mode} {size} bytes: sender CPU {cpu / count * 1e6:.1f} us per body, {count * size / wall / 1e9:.2f} GB/s")
