import socket, time, sys
# usage: lat2.py PORT PATH N GAP_S : N requests on one keep-alive connection, GAP_S apart; percentiles
port=int(sys.argv[1]); path=sys.argv[2]; n=int(sys.argv[3]); gap=float(sys.argv[4])
s=socket.create_connection(("127.0.0.1",port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
req=f"GET {path} HTTP/1.1\r\nhost: t\r\n\r\n".encode()
def one():
    s.sendall(req); buf=b""
    while b"\r\n\r\n" not in buf: buf+=s.recv(65536)
    head,rest=buf.split(b"\r\n\r\n",1)
    cl=int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
    got=len(rest)
    while got<cl: got+=len(s.recv(1<<20))
for _ in range(20): one()
ts=[]
for _ in range(n):
    t=time.perf_counter(); one(); ts.append(time.perf_counter()-t); time.sleep(gap)
ts.sort(); q=lambda p: ts[min(n-1,int(n*p))]*1e6
print(f"n {n} median {q(.5):.0f} p90 {q(.9):.0f} p95 {q(.95):.0f} p99 {q(.99):.0f} us")
