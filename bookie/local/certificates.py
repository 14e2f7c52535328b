"""A local CA and certificates for a development cluster on this machine (`kvstore up --tls`).

`development_certificates(directory)` writes, once, and afterwards reuses::

    DIR/ca.pem       the CA's certificate (what clients trust: --cacert, ssl_ca_certs)
    DIR/ca-key.pem   the CA's private key (to issue more certificates; mode 0600)
    DIR/node.pem     the certificate every bookie and replica presents, as server and as
                     client: its private key, then its certificate (one PEM file), for
                     127.0.0.1 and localhost, common name `NODE_NAME`
    DIR/client.pem   a client certificate for people and tools (common name `CLIENT_NAME`),
                     its private key then its certificate

All are PEM (RFC 7468): keys are PKCS #8 ECDSA P-256, unencrypted (mode 0600);
certificates X.509 v3, SHA-256 signed.  The CA's is valid for
`ca_valid_days`, the others for `leaf_valid_days`, from an hour before they
were made (clocks differ).  These files are for a cluster on one machine:
anyone who can read the directory can act as any of its processes.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NODE_NAME: Final = "kvstore-node"
CLIENT_NAME: Final = "kvstore-client"
ca_valid_days: Final = 3650
leaf_valid_days: Final = 825
_CLOCK_SKEW: Final = datetime.timedelta(hours=1)
_PRIVATE_MODE: Final = 0o600


@dataclass(frozen=True, slots=True)
class DevelopmentCertificates:
    """Where the files are (see the module docstring)."""

    ca: Path
    ca_key: Path
    node: Path
    client: Path


def development_certificates(directory: Path) -> DevelopmentCertificates:
    """The directory's certificates, made now if the directory holds none."""
    paths = DevelopmentCertificates(
        ca=directory / "ca.pem",
        ca_key=directory / "ca-key.pem",
        node=directory / "node.pem",
        client=directory / "client.pem",
    )
    if all(path.exists() for path in (paths.ca, paths.ca_key, paths.node, paths.client)):
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kvstore development CA")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now, ca_valid_days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    write_file(paths.ca_key, _key_pem(ca_key), private=True)
    write_file(paths.ca, ca.public_bytes(serialization.Encoding.PEM), private=False)
    write_file(paths.node, _leaf(ca, ca_key, NODE_NAME, now, loopback=True), private=True)
    write_file(paths.client, _leaf(ca, ca_key, CLIENT_NAME, now, loopback=False), private=True)
    return paths


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    now: datetime.datetime,
    days: int,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _leaf(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    name: str,
    now: datetime.datetime,
    *,
    loopback: bool,
) -> bytes:
    """A key and its certificate for `name`, signed by the CA, as one PEM file; with
    `loopback`, valid as a server for 127.0.0.1 and localhost too."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    names: list[x509.GeneralName] = [x509.DNSName(name)]
    if loopback:
        names += [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    certificate = (
        _builder(subject, ca.subject, key.public_key(), now, leaf_valid_days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return _key_pem(key) + certificate.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_file(path: Path, data: bytes, *, private: bool) -> None:
    """Write `data` to `path`, readable by its owner only when `private` (an existing file
    too: the mode `open` is given applies only to a file it creates)."""
    mode = _PRIVATE_MODE if private else 0o644
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(descriptor, "wb") as handle:
        os.fchmod(handle.fileno(), mode)
        handle.write(data)
