#!/usr/bin/env python3
"""A fixed number of memcached text requests, one at a time, over raw bytes.

Used by scripts/callgrind-per-request.sh and scripts/syscalls-per-request.sh to make a
server do an exact amount of work, so that instructions or system calls can be divided
by a request count. Each request waits for its whole reply before the next is sent
(depth 1, the common case of a client library), over CONNECTIONS connections served in
turn, so the servers see the same sequence of reads and writes.

    fixed-requests.py --port P --workload get-hit --value-bytes 100 --requests 2000

Workloads:
  preload   store the KEYS keys (values of --value-bytes) that the others read
  get-hit   `get k` of a stored key (keys in turn)
  get-miss  `get k` of a key never stored
  set       `set k 0 0 N` of a stored key (overwrites)
  mget10    `get k1 ... k10` of ten stored keys (one request)

Exits non-zero with the reason if a reply is not the one memcached gives, so a count is
never taken from a server that did something else.
"""

import argparse
import socket
import sys

KEYS = 1000
KEY_PREFIX = b"fixed:"


def key(i):
    return KEY_PREFIX + str(i % KEYS).encode()


def read_until(sock, buf, terminator):
    """Reads until `buf` ends with `terminator`; returns the reply and clears `buf`."""
    while not buf.endswith(terminator):
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise SystemExit("server closed the connection")
        buf.extend(chunk)
    reply = bytes(buf)
    buf.clear()
    return reply


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int)
    parser.add_argument("--unix", help="a unix-domain socket path instead of TCP")
    parser.add_argument(
        "--workload",
        required=True,
        choices=["preload", "get-hit", "get-miss", "set", "mget10"],
    )
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=1)
    args = parser.parse_args()

    socks = []
    for _ in range(args.connections):
        if args.unix:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(args.unix)
        else:
            s = socket.create_connection((args.host, args.port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    buf = bytearray()
    value = b"v" * args.value_bytes
    expected_value = b" 0 %d\r\n" % args.value_bytes + value + b"\r\n"

    count = KEYS if args.workload == "preload" else args.requests
    for i in range(count):
        sock = socks[i % len(socks)]
        if args.workload in ("preload", "set"):
            sock.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key(i), args.value_bytes, value))
            reply = read_until(sock, buf, b"\r\n")
            ok = reply == b"STORED\r\n"
        elif args.workload == "get-hit":
            k = key(i)
            sock.sendall(b"get %s\r\n" % k)
            reply = read_until(sock, buf, b"END\r\n")
            ok = reply == b"VALUE " + k + expected_value + b"END\r\n"
        elif args.workload == "get-miss":
            sock.sendall(b"get missing:%d\r\n" % i)
            reply = read_until(sock, buf, b"END\r\n")
            ok = reply == b"END\r\n"
        else:
            keys = [key(i * 10 + j) for j in range(10)]
            sock.sendall(b"get " + b" ".join(keys) + b"\r\n")
            reply = read_until(sock, buf, b"END\r\n")
            ok = reply.count(b"VALUE ") == 10 and len(reply) == sum(
                len(b"VALUE " + k + expected_value) for k in keys
            ) + len(b"END\r\n")
        if not ok:
            sys.exit(f"{args.workload} request {i}: unexpected reply {reply[:200]!r}")
    for s in socks:
        s.close()


if __name__ == "__main__":
    main()
