"""Self-signed certificates for local TLS servers (python ``cryptography``): the domains
sandbox's TLS-only hosts, and the TLS front end the tests put before Redis."""

from __future__ import annotations

import datetime
import ssl
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def write_self_signed(
    directory: Path,
    common_name: str,
    alt_names: Sequence[x509.GeneralName],
    stem: str = "cert",
    days: float = 30,
) -> tuple[Path, Path]:
    """A fresh self-signed certificate (its own CA) for ``alt_names`` and its key, written to
    ``directory`` as ``<stem>.pem`` and ``<stem>.key``; returns both paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(list(alt_names)), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def self_signed_context(directory: Path, name: str = "localhost") -> ssl.SSLContext:
    """A server SSL context with a fresh self-signed certificate for ``name`` only, its files
    written to ``directory``: as a server left with its default certificate, it matches none
    of the domains it serves (a client that checks it warns)."""
    cert_path, key_path = write_self_signed(directory, name, [x509.DNSName(name)])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context
