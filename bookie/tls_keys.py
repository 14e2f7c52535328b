"""Loading a TLS private key without a terminal: an encrypted key is refused, never asked for.

`SSLContext.load_cert_chain` asks OpenSSL for the passphrase of an encrypted
key on the controlling terminal when it is given none, so a process started
from a shell waits there for ever, and one without a terminal fails with an
`OSError` that says nothing.  `refuse_passphrase`, given as its `password`, is
called only for an encrypted key and raises `EncryptedKey`; the callers (the
bookie's and replicas' TLS, bookie/net/tls.py, and the ZooKeeper client's,
bookie/meta/zk_tls.py) turn that into a configuration error with
`encrypted_key_message`.
"""

from __future__ import annotations

from pathlib import Path


class EncryptedKey(Exception):
    """A private key file is encrypted with a passphrase (`refuse_passphrase` was asked)."""


def refuse_passphrase() -> bytes:
    """The `password` of `SSLContext.load_cert_chain`; see the module docstring."""
    raise EncryptedKey


def encrypted_key_message(key_file: str | Path) -> str:
    """Why an encrypted key is refused, and what to do."""
    return (
        f"the private key in {key_file} is encrypted with a passphrase, which a process "
        "cannot ask for: give the key unencrypted (`openssl pkey -in KEY -out NEW`), in a "
        "file readable by the service's user only"
    )
