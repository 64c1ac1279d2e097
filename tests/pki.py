"""Test certificates made with `cryptography`: a CA, bookie/server and client certificates it signed, and a
rogue CA with its own client certificate (one that no bkaudit component trusts)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> tuple[str, str]:
    key_path, cert_path = path.with_suffix(".key"), path.with_suffix(".crt")
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(cert_path), str(key_path)


def _cert(subject: str, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None, *, ca: bool = False,
          san: bool = False) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer if issuer else (_name(subject), key)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [*(x509.IPAddress(ipaddress.ip_address(f"127.0.0.{i}")) for i in range(1, 10)),  # each bookie's
             x509.DNSName("localhost")]), critical=False)  # own loopback address (cluster.local)
    return key, builder.sign(issuer_key, hashes.SHA256())


def make_pki(d: Path) -> dict[str, str]:
    """Files under `d`: ca, other_ca, server_cert/key (SAN: 127.0.0.1-9, localhost), client_cert/key (signed
    by ca), rogue_cert/key (signed by other_ca)."""
    ca_key, ca = _cert("bkaudit test CA", None, ca=True)
    other_key, other_ca = _cert("some other CA", None, ca=True)
    out: dict[str, str] = {}
    out["ca"], _ = _write(d / "ca", ca_key, ca)
    out["other_ca"], _ = _write(d / "other-ca", other_key, other_ca)
    server = _cert("bookie", (ca.subject, ca_key), san=True)
    out["server_cert"], out["server_key"] = _write(d / "server", *server)
    out["client_cert"], out["client_key"] = _write(d / "client", *_cert("client", (ca.subject, ca_key)))
    out["rogue_cert"], out["rogue_key"] = _write(d / "rogue", *_cert("rogue", (other_ca.subject, other_key)))
    return out
