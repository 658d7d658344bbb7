"""An https webhook end to end, with real worker processes on a real Redis: the worker connects to the vetted address
and speaks TLS with the URL's name (SNI, certificate check, Host header), trusting the private CA that
CLAUDEQ_WEBHOOK_CA_FILE names; a receiver whose certificate names another host never gets the POST
(docs/notifications.md#webhooks)."""

from __future__ import annotations

import base64
import datetime
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import SecretStr

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import run_until
from tests.support.worker_proc import FAST_E2E

pytestmark = pytest.mark.e2e

SECRET = "whsec_" + base64.b64encode(b"claudeq-e2e-webhook-tls-secret-01234").decode()


def self_signed(name: str, directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for `name` (its own CA) and its key, as PEM files; -> (cert, key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class TLSReceiver:
    """An https receiver on 127.0.0.1 presenting `cert`; records each POST's path and Host header."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.seen: list[dict[str, Any]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                seen.append({"path": self.path, "host": self.headers.get("host")})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers(tmp_path: Path) -> Iterator[dict[str, TLSReceiver]]:
    """`right`: a certificate for localhost; `wrong`: one for another name. Both certificates are in `ca.pem`."""
    right, wrong = self_signed("localhost", tmp_path), self_signed("other.test", tmp_path)
    (tmp_path / "ca.pem").write_bytes(right[0].read_bytes() + wrong[0].read_bytes())
    found = {"right": TLSReceiver(*right), "wrong": TLSReceiver(*wrong)}
    yield found
    for receiver in found.values():
        receiver.close()


@pytest.fixture
def settings(
    redis_url: str, unique: str, accounts_file: Path, receivers: dict[str, TLSReceiver], tmp_path: Path
) -> Settings:
    return make_settings(
        redis_url,
        unique,
        accounts_file=accounts_file,
        webhook_hosts=["localhost"],  # resolves to 127.0.0.1 here
        webhook_ports=[r.port for r in receivers.values()],
        webhook_allow_nets=["127.0.0.0/8"],
        webhook_ca_file=tmp_path / "ca.pem",
        webhook_secret=SecretStr(SECRET),
        webhook_timeout_s=2.0,
        notify_backoff_s=0.1,
        notify_max_attempts=2,
        **FAST_E2E,
    )


def test_an_https_webhook_reaches_the_receiver_its_certificate_names_and_no_other(
    client: Client, workers: WorkerFactory, receivers: dict[str, TLSReceiver], unique: str
) -> None:
    workers()
    right, wrong = receivers["right"], receivers["wrong"]
    good = client.submit(
        prompt=f'[[sim: text "ok"]] tls {unique}', webhook={"url": f"https://localhost:{right.port}/ok"}
    )
    bad = client.submit(
        prompt=f'[[sim: text "ok"]] wrong name {unique}', webhook={"url": f"https://localhost:{wrong.port}/ok"}
    )
    for handle in (good, bad):
        assert client.wait(handle.id, timeout=120).status == "succeeded"

    def settled(job_id: str) -> bool:
        notes = client.get(job_id).notifications
        return bool(notes) and all(n.state != "pending" for n in notes)

    for handle in (good, bad):
        run_until(lambda h=handle: settled(h.id), timeout=60, what=f"job {handle.id}: notification still pending")
    [delivered] = client.get(good.id).notifications
    assert delivered.state == "delivered" and delivered.status_code == 200, delivered
    assert right.seen == [{"path": "/ok", "host": f"localhost:{right.port}"}]  # the URL's name, not the address
    [refused] = client.get(bad.id).notifications
    assert refused.state == "dead" and refused.error and "could not reach the receiver" in refused.error, refused
    assert wrong.seen == []  # the TLS handshake failed: nothing was POSTed
