"""A fault-injecting HTTP/1.1 proxy for the replay tests (a process of its own; loopback only).

    python tests/_fault_proxy.py --upstream http://127.0.0.1:PORT --port-file F --log L
        [--p503 R] [--p429 R] [--pdelay R] [--preset R] [--delay SECONDS] [--seed N]

Each request, before it reaches the upstream service, draws one fault at the given rates:
``503`` (Retry-After: 0), ``429`` (Retry-After: 1), ``delay`` (no answer for ``--delay`` seconds,
past the client's timeout, then the connection is closed) or ``reset`` (the connection is reset:
TCP RST). The other requests are forwarded; when the upstream cannot be reached the answer is 502.
Faults never reach the upstream, so a service counts exactly the requests forwarded to it.

Every event is a JSON line in ``--log`` (flushed at once): ``{"ev": "fault", "kind", "target",
"body"}``, ``{"ev": "forward", ...}`` when a request is sent upstream, ``{"ev": "delivered",
"status", ...}`` once its answer is written back to the client, ``{"ev": "upstream_error", ...}``.
The port listened on is written to ``--port-file`` once the proxy accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import struct

import httpx

REASONS = {200: "OK", 401: "Unauthorized", 404: "Not Found", 422: "Unprocessable Entity",
           429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
           503: "Service Unavailable"}


class Proxy:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rng = random.Random(args.seed)
        self.log_fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.client = httpx.AsyncClient(base_url=args.upstream, timeout=60, trust_env=False,
                                        limits=httpx.Limits(max_connections=64))

    def log(self, **event) -> None:
        os.write(self.log_fd, (json.dumps(event) + "\n").encode())

    def draw(self) -> str | None:
        a, r = self.args, self.rng.random()
        for kind, p in (("503", a.p503), ("429", a.p429), ("delay", a.pdelay), ("reset", a.preset)):
            if r < p:
                return kind
            r -= p
        return None

    async def respond(self, writer, status: int, body: bytes, ctype: str = "application/json",
                      extra: dict | None = None) -> None:
        head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}", f"content-type: {ctype}",
                f"content-length: {len(body)}", *[f"{k}: {v}" for k, v in (extra or {}).items()]]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()

    async def handle(self, reader, writer) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length", "0"))
                body = await reader.readexactly(n) if n else b""
                what = {"method": method, "target": target, "body": body.decode("utf-8", "replace")}
                fault = self.draw()
                if fault is not None:
                    self.log(ev="fault", kind=fault, **what)
                if fault == "503":
                    await self.respond(writer, 503, b'{"error":"injected 503"}', extra={"retry-after": "0"})
                    continue
                if fault == "429":
                    await self.respond(writer, 429, b'{"error":"injected 429"}', extra={"retry-after": "1"})
                    continue
                if fault == "delay":
                    await asyncio.sleep(self.args.delay)
                    return
                if fault == "reset":
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                self.log(ev="forward", **what)
                fwd = {k: v for k, v in headers.items() if k in ("content-type", "authorization", "accept")}
                try:
                    r = await self.client.request(method, target, content=body, headers=fwd)
                except httpx.TransportError as e:
                    self.log(ev="upstream_error", error=type(e).__name__, **what)
                    await self.respond(writer, 502, b'{"error":"upstream unreachable"}')
                    continue
                extra = {"retry-after": r.headers["retry-after"]} if "retry-after" in r.headers else None
                await self.respond(writer, r.status_code, r.content,
                                   r.headers.get("content-type", "application/octet-stream"), extra)
                self.log(ev="delivered", status=r.status_code, **what)
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def serve(self) -> None:
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tmp = self.args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, self.args.port_file)
        async with server:
            await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    for name in ("p503", "p429", "pdelay", "preset"):
        ap.add_argument(f"--{name}", type=float, default=0.0)
    ap.add_argument("--delay", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    asyncio.run(Proxy(ap.parse_args()).serve())


if __name__ == "__main__":
    main()
