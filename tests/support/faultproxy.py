"""A fault-injecting HTTPS proxy in front of the Kubernetes API server.

Clients connect to the proxy (TLS with the proxy's own CA) with a bearer token; the proxy
forwards each request to the real API server over TLS, one upstream connection per request
(it asks for `Connection: close`, so request boundaries are connection boundaries). For a
chosen share of requests it instead answers an HTTP error (429 with Retry-After, 500, 503),
or drops the connection; it can add delay, and drop every open connection at once (what a
flaky network or a load balancer does to long watches). It can refuse the first N requests
(e.g. 403 / 401, as an API server does while its authorizer warms up after a restart), only
those whose request line contains a given string.

Runs an asyncio loop in a background thread; use it as a context manager.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import ssl
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Self
from urllib.parse import urlparse


@dataclass
class Faults:
    error_share: float = 0.0  # share of requests answered with error_status
    error_status: int = 503
    drop_share: float = 0.0  # share of requests whose connection is closed unanswered
    delay: float = 0.0  # seconds added before forwarding
    only_watches: bool = False  # inject only into watch requests
    gone_share: float = 0.0  # share of watch requests answered "410 Gone" (resourceVersion expired)
    response_delay: float = 0.0  # seconds the upstream's answer is held back (the request went through)
    methods: tuple[str, ...] = ()  # only requests with these methods are faulted (empty: all)
    error_count: int = 0  # answer error_status to the first N eligible requests, then pass them
    path_contains: str = ""  # only requests whose request line contains this are faulted
    error_message: str = ""  # the Status message of injected errors (default: "injected by faultproxy")


class FaultProxy:
    def __init__(self, upstream: str, upstream_ca: str | None, seed: int = 7):
        parsed = urlparse(upstream)
        self.upstream_host, self.upstream_port = parsed.hostname, parsed.port or 443
        self.upstream_ctx = ssl.create_default_context(cafile=upstream_ca) if upstream_ca else _insecure()
        self.faults = Faults()
        self.rng = random.Random(seed)
        self.requests = 0
        self.injected = 0
        self.dropped = 0
        self.gone = 0
        self._errors_left = 0
        self.refused: list[str] = []  # request lines answered by error_count
        self._writers: set[asyncio.StreamWriter] = set()
        self._dir = tempfile.TemporaryDirectory(prefix="faultproxy-")
        self.ca_file, cert, key = _make_certs(Path(self._dir.name))
        self._server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._server_ctx.load_cert_chain(cert, key)
        self._server_ctx.set_alpn_protocols(["http/1.1"])
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="faultproxy")
        self.port = 0

    # -- control (from the test's thread) ---------------------------------------------------
    def __enter__(self) -> Self:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        self.port = fut.result(10)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._dir.cleanup()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def set(self, **faults) -> None:
        self.faults = Faults(**faults)
        self._errors_left = self.faults.error_count

    def drop_connections(self) -> int:
        """Close every open client connection (breaks in-flight watches)."""
        return asyncio.run_coroutine_threadsafe(self._drop_all(), self._loop).result(10)

    # -- proxy (in the loop's thread) ------------------------------------------------------
    async def _start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self._server_ctx)
        return self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        self._server.close()
        await self._drop_all()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _drop_all(self) -> int:
        writers = list(self._writers)
        for w in writers:
            w.transport.abort()
        return len(writers)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, headers = _parse_head(head)
            body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
            self.requests += 1
            f = self.faults
            method = request_line.split(" ", 1)[0]
            eligible = ((not f.only_watches or "watch=true" in request_line) and (not f.methods or method in f.methods)
                        and f.path_contains in request_line)
            if eligible and self._errors_left > 0:
                self._errors_left -= 1
                self.injected += 1
                self.refused.append(request_line)
                writer.write(_error_response(f.error_status, f.error_message))
                await writer.drain()
                return
            if eligible and self.rng.random() < f.drop_share:
                self.dropped += 1
                writer.transport.abort()
                return
            if "watch=true" in request_line and self.rng.random() < f.gone_share:
                # what the API server sends for a too-old resourceVersion: a 200 whose first
                # watch event is an ERROR carrying a 410 Status
                self.gone += 1
                writer.write(_gone_response())
                await writer.drain()
                return
            if eligible and self.rng.random() < f.error_share:
                self.injected += 1
                writer.write(_error_response(f.error_status, f.error_message))
                await writer.drain()
                return
            if eligible and f.delay:
                await asyncio.sleep(f.delay)
            await self._forward(head, body, writer, f.response_delay if eligible else 0.0)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, asyncio.LimitOverrunError,
                asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _forward(self, head: bytes, body: bytes, writer: asyncio.StreamWriter, hold: float = 0.0) -> None:
        up_reader, up_writer = await asyncio.open_connection(
            self.upstream_host, self.upstream_port, ssl=self.upstream_ctx,
            server_hostname=self.upstream_host)
        try:
            up_writer.write(_force_close(head) + body)
            await up_writer.drain()
            if hold:
                await asyncio.sleep(hold)
            while chunk := await up_reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        finally:
            up_writer.close()


def _parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    return lines[0], headers


def _force_close(head: bytes) -> bytes:
    lines = [ln for ln in head.decode("latin-1").split("\r\n") if ln and not ln.lower().startswith("connection:")]
    return ("\r\n".join(lines) + "\r\nConnection: close\r\n\r\n").encode("latin-1")


def _error_response(status: int, message: str = "") -> bytes:
    reasons = {401: "Unauthorized", 403: "Forbidden", 429: "Too Many Requests", 500: "Internal Server Error",
               503: "Service Unavailable"}
    reason = reasons.get(status, "Error")
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                       "reason": reason.replace(" ", ""),
                       "message": message or f"injected by faultproxy: {reason}"}).encode()
    extra = "Retry-After: 1\r\n" if status == 429 else ""
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def _gone_response() -> bytes:
    event = json.dumps({"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version (injected by faultproxy)", "reason": "Expired", "code": 410}})
    body = (event + "\n").encode()
    return (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


def _insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _make_certs(folder: Path) -> tuple[str, str, str]:
    """A throwaway CA and a server certificate for 127.0.0.1, signed by it."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "faultproxy-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (folder / "ca.crt").write_bytes(ca.public_bytes(pem))
    (folder / "tls.crt").write_bytes(cert.public_bytes(pem))
    (folder / "tls.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return str(folder / "ca.crt"), str(folder / "tls.crt"), str(folder / "tls.key")
