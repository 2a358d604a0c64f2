"""A socket to one Kafka broker, secured as the connector's librdkafka clients are: TLS, SASL, and the
``ApiVersions`` exchange, for the transaction requests :mod:`.transaction_admin` speaks itself.

:func:`open_broker_socket` reads the same (librdkafka) keys the connector's clients get (after
:func:`~.security.librdkafka_properties`): ``security.protocol`` (``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``,
``SASL_SSL``); for TLS ``ssl.ca.location`` / ``ssl.ca.pem``, ``ssl.certificate.location`` / ``.pem``,
``ssl.key.location`` / ``.pem``, ``ssl.key.password`` and ``ssl.endpoint.identification.algorithm``
(``https``, librdkafka's default, checks the broker's name; ``none`` does not); for SASL ``sasl.mechanism``
(``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``, ``OAUTHBEARER`` with librdkafka's unsecured tokens),
``sasl.username``, ``sasl.password`` and ``sasl.oauthbearer.config``. Anything else (Kerberos, OIDC tokens, a
PKCS#12 key store) is refused with :class:`~flinklike_spark.errors.ConfigurationError` naming it.

SASL runs Kafka's ``SaslHandshake`` v1 then ``SaslAuthenticate`` v1 frames (KIP-152); SCRAM is RFC 5802 /
RFC 7677; an unsecured OAUTHBEARER token is a JWS with ``alg: none`` (RFC 7515), sent as RFC 7628's
client response, as librdkafka's ``enable.sasl.oauthbearer.unsecure.jwt`` does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socket
import ssl
import struct
import tempfile
import time
from collections.abc import Mapping

from flinklike_spark.errors import ConfigurationError

__all__ = ["BrokerAuthenticationError", "open_broker_socket", "recv_exactly", "supported_versions"]

_SASL_HANDSHAKE, _API_VERSIONS, _SASL_AUTHENTICATE = 17, 18, 36
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class BrokerAuthenticationError(ConnectionError):
    """The broker refused the SASL credentials or mechanism (its message is included)."""


def open_broker_socket(
    address: tuple[str, int], properties: Mapping[str, str], *, timeout: float, client_id: str
) -> tuple[socket.socket, dict[int, tuple[int, int]]]:
    """A connected, authenticated socket to the broker at ``address`` and the API versions it supports.

    Returns:
        The socket (TLS-wrapped for ``SSL`` / ``SASL_SSL``) and ``{api key: (min version, max version)}``
        from the broker's ``ApiVersions`` answer.

    Raises:
        ConfigurationError: a security setting this module cannot follow (named).
        BrokerAuthenticationError: the broker refused the credentials or the mechanism.
        OSError: the broker is unreachable or the TLS handshake failed.
    """
    protocol = str(properties.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in _PROTOCOLS:
        raise ConfigurationError(f"security.protocol={protocol!r} is not one of {list(_PROTOCOLS)}")
    context = _ssl_context(properties) if protocol in ("SSL", "SASL_SSL") else None
    sock = socket.create_connection(address, timeout=timeout)
    try:
        sock.settimeout(timeout)
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname=address[0])
        frames = _Frames(sock, address, client_id)
        versions = frames.api_versions()
        if protocol.startswith("SASL_"):
            _authenticate(frames, properties)
        return sock, versions
    except BaseException:
        sock.close()
        raise


def recv_exactly(sock: socket.socket, n: int, address: tuple[str, int]) -> bytes:
    """The next ``n`` bytes from ``sock``; ConnectionError naming the broker at ``address`` if it closes first."""
    chunks, remaining = [], n
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ConnectionError(f"Kafka broker {address[0]}:{address[1]} closed the connection")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def supported_versions(versions: Mapping[int, tuple[int, int]], api_key: int, wanted: tuple[int, ...]) -> int:
    """The highest of ``wanted`` that the broker supports for ``api_key``.

    Raises:
        ConfigurationError: none of them is (the broker is too old or too new for this client; both named).
    """
    low, high = versions.get(api_key, (0, -1))
    usable = [v for v in wanted if low <= v <= high]
    if not usable:
        raise ConfigurationError(
            f"the Kafka broker supports versions {low}..{high} of API {api_key}; this client speaks {list(wanted)}"
        )
    return max(usable)


def _ssl_context(properties: Mapping[str, str]) -> ssl.SSLContext:
    refused = [k for k in ("ssl.keystore.location", "ssl.keystore.password") if k in properties]
    if refused:
        raise ConfigurationError(
            f"the Kafka transaction requests read PEM keys only; {refused[0]!r} (a PKCS#12 key store) is not read: "
            "use ssl.keystore.type=PEM (or librdkafka's ssl.certificate.location and ssl.key.location)"
        )
    context = ssl.create_default_context()
    if "ssl.ca.location" in properties or "ssl.ca.pem" in properties:
        context = ssl.create_default_context(
            cafile=properties.get("ssl.ca.location"), cadata=properties.get("ssl.ca.pem")
        )
    if properties.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        context.check_hostname = False
    cert, key = properties.get("ssl.certificate.location"), properties.get("ssl.key.location")
    password = properties.get("ssl.key.password")
    if "ssl.certificate.pem" in properties or "ssl.key.pem" in properties:
        with tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False) as pem:
            pem.write(properties.get("ssl.key.pem", "") + "\n" + properties.get("ssl.certificate.pem", ""))
        try:
            context.load_cert_chain(pem.name, password=password)
        finally:
            os.unlink(pem.name)
    elif cert is not None:
        context.load_cert_chain(cert, keyfile=key, password=password)
    return context


class _Frames:
    """Kafka's non-flexible request frames (header v1), enough for ApiVersions v0 and the SASL requests."""

    def __init__(self, sock: socket.socket, address: tuple[str, int], client_id: str) -> None:
        self._sock, self._address = sock, address
        self._client_id = client_id.encode()
        self._correlation = 0

    def call(self, api_key: int, version: int, body: bytes) -> bytes:
        self._correlation += 1
        header = struct.pack(">hhih", api_key, version, self._correlation, len(self._client_id)) + self._client_id
        payload = header + body
        self._sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", self._recv(4))
        response = self._recv(size)
        if struct.unpack(">i", response[:4])[0] != self._correlation:
            raise ConnectionError("Kafka broker answered out of order")
        return response[4:]

    def _recv(self, n: int) -> bytes:
        return recv_exactly(self._sock, n, self._address)

    def api_versions(self) -> dict[int, tuple[int, int]]:
        data = self.call(_API_VERSIONS, 0, b"")
        error, count = struct.unpack(">hi", data[:6])
        if error:
            raise ConnectionError(f"the Kafka broker refused ApiVersions (error code {error})")
        return {
            key: (low, high)
            for key, low, high in (struct.unpack(">hhh", data[6 + 6 * i : 12 + 6 * i]) for i in range(count))
        }

    def handshake(self, mechanism: str) -> None:
        data = self.call(_SASL_HANDSHAKE, 1, _string(mechanism))
        (error,) = struct.unpack(">h", data[:2])
        if error:
            offered, (count,) = [], struct.unpack(">i", data[2:6])
            position = 6
            for _ in range(count):
                (length,) = struct.unpack(">h", data[position : position + 2])
                offered.append(data[position + 2 : position + 2 + length].decode())
                position += 2 + length
            raise BrokerAuthenticationError(f"the Kafka broker does not offer SASL {mechanism}; it offers {offered}")

    def authenticate(self, auth_bytes: bytes) -> bytes:
        data = self.call(_SASL_AUTHENTICATE, 1, struct.pack(">i", len(auth_bytes)) + auth_bytes)
        (error,) = struct.unpack(">h", data[:2])
        (length,) = struct.unpack(">h", data[2:4])
        position = 4 + max(length, 0)
        message = data[4:position].decode(errors="replace") if length >= 0 else ""
        if error:
            raise BrokerAuthenticationError(f"the Kafka broker refused SASL authentication: {message or error}")
        (size,) = struct.unpack(">i", data[position : position + 4])
        return data[position + 4 : position + 4 + max(size, 0)]


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _authenticate(frames: _Frames, properties: Mapping[str, str]) -> None:
    mechanism = str(properties.get("sasl.mechanism") or properties.get("sasl.mechanisms") or "GSSAPI").upper()
    if mechanism not in _MECHANISMS:
        raise ConfigurationError(
            f"sasl.mechanism={mechanism!r} is not supported for Kafka transactions here; use one of {list(_MECHANISMS)}"
        )
    frames.handshake(mechanism)
    if mechanism == "OAUTHBEARER":
        frames.authenticate(_unsecured_oauth_response(properties))
        return
    user, password = properties.get("sasl.username"), properties.get("sasl.password")
    if user is None or password is None:
        raise ConfigurationError(f"SASL {mechanism} needs sasl.username and sasl.password (or sasl.jaas.config)")
    if mechanism == "PLAIN":
        frames.authenticate(f"\0{user}\0{password}".encode())
        return
    _scram(frames, mechanism, user, password)


def _scram(frames: _Frames, mechanism: str, user: str, password: str) -> None:
    digest = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
    name = user.replace("=", "=3D").replace(",", "=2C")
    nonce = base64.b64encode(os.urandom(24)).decode()
    client_first_bare = f"n={name},r={nonce}"
    server_first = frames.authenticate(f"n,,{client_first_bare}".encode()).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    if not fields["r"].startswith(nonce):
        raise BrokerAuthenticationError("the Kafka broker's SCRAM nonce does not extend ours")
    salted = hashlib.pbkdf2_hmac(digest().name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(digest(client_key).digest(), auth_message, digest).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    server_final = frames.authenticate(f"{without_proof},p={proof}".encode()).decode()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, digest).digest()).decode()
    if server_final != f"v={expected}":
        raise BrokerAuthenticationError("the Kafka broker's SCRAM signature does not verify")


def _unsecured_oauth_response(properties: Mapping[str, str]) -> bytes:
    """RFC 7628's client response carrying an unsecured JWS, from librdkafka's ``sasl.oauthbearer.config``
    (``principal=<sub> [scope=<a,b>] [lifeSeconds=<n>] [extension_<k>=<v>]``)."""
    if str(properties.get("enable.sasl.oauthbearer.unsecure.jwt", "false")).lower() != "true":
        raise ConfigurationError(
            "SASL OAUTHBEARER for Kafka transactions needs unsecured tokens here "
            "(enable.sasl.oauthbearer.unsecure.jwt=true with sasl.oauthbearer.config='principal=...'); "
            "OIDC token endpoints are not supported for them"
        )
    settings = dict(
        part.split("=", 1) for part in str(properties.get("sasl.oauthbearer.config", "")).split() if "=" in part
    )
    if "principal" not in settings:
        raise ConfigurationError("sasl.oauthbearer.config needs principal=<name> for an unsecured token")
    now = int(time.time())
    claims: dict[str, object] = {
        "sub": settings["principal"],
        "iat": now,
        "exp": now + int(settings.get("lifeSeconds", 3600)),
    }
    if "scope" in settings:
        claims["scope"] = settings["scope"].split(",")

    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode().rstrip("=")

    token = f"{part({'alg': 'none'})}.{part(claims)}."
    extensions = "".join(f"\x01{k[len('extension_') :]}={v}" for k, v in settings.items() if k.startswith("extension_"))
    return f"n,,\x01auth=Bearer {token}{extensions}\x01\x01".encode()
