"""The Java Kafka client's security keys, translated to librdkafka's.

A PyFlink program passes the Java client's properties (``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config``, ``ssl.truststore.location``, ...); librdkafka takes the same protocol and mechanism
keys but no JAAS configuration and no Java key stores. :func:`librdkafka_properties` rewrites a connector's
properties once, when its builder builds it (so a bad key fails the program, not every task attempt):

===============================================  ===========================================================
Java client                                      librdkafka
===============================================  ===========================================================
``sasl.jaas.config`` ``PlainLoginModule`` /      ``sasl.username``, ``sasl.password``
``ScramLoginModule`` (``username``, ``password``)
``sasl.jaas.config`` ``OAuthBearerLoginModule``  ``enable.sasl.oauthbearer.unsecure.jwt=true``,
with ``unsecuredLoginStringClaim_sub``           ``sasl.oauthbearer.config`` (``principal=``, ``scope=``,
                                                 ``lifeSeconds=``)
``sasl.jaas.config`` ``OAuthBearerLoginModule``  ``sasl.oauthbearer.method=oidc``,
with ``clientId`` / ``clientSecret``             ``sasl.oauthbearer.client.id`` / ``.client.secret``
                                                 (``sasl.oauthbearer.token.endpoint.url`` is the same key)
``sasl.jaas.config`` ``Krb5LoginModule``         ``sasl.kerberos.principal``, ``sasl.kerberos.keytab``
``ssl.truststore.type=PEM`` + ``.location``      ``ssl.ca.location``
``ssl.truststore.certificates`` (PEM text)       ``ssl.ca.pem``
``ssl.keystore.type=PEM`` + ``.location``        ``ssl.certificate.location`` and ``ssl.key.location``
``ssl.keystore.certificate.chain`` / ``.key``    ``ssl.certificate.pem`` / ``ssl.key.pem``
``ssl.keystore.type=PKCS12`` + ``.location``     ``ssl.keystore.location`` (``.password`` too): the same keys
``ssl.endpoint.identification.algorithm=``       ``ssl.endpoint.identification.algorithm=none``
===============================================  ===========================================================

``security.protocol``, ``sasl.mechanism``, ``ssl.key.password`` and ``sasl.kerberos.service.name`` mean the
same in both. A JKS store (Java's default type) is refused with the PEM keys to use instead; so is a key that
changes authentication in a way librdkafka cannot follow (a callback handler class, a login module it lacks).
The Java client's TLS tuning keys (``ssl.protocol``, ``ssl.enabled.protocols``, key/trust manager algorithms)
have no librdkafka equivalent: each is dropped with a warning naming it. librdkafka's own keys pass unchanged
and win over a translated value.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path

from flinklike_spark.errors import ConfigurationError

__all__ = ["librdkafka_properties"]

_log = logging.getLogger(__name__)

_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_KERBEROS_MODULE = "com.sun.security.auth.module.Krb5LoginModule"
_JKS_MAGIC = b"\xfe\xed\xfe\xed"

# Java-only TLS tuning: no librdkafka key; dropped with a warning.
_DROPPED = frozenset({
    "ssl.protocol", "ssl.enabled.protocols", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation", "ssl.provider", "ssl.truststore.password",
})  # fmt: skip
# Java-only keys that change how the client authenticates: refused, never ignored.
_REFUSED = {
    "sasl.login.callback.handler.class": "librdkafka runs no Java callback handlers",
    "sasl.client.callback.handler.class": "librdkafka runs no Java callback handlers",
    "sasl.login.class": "librdkafka runs no Java login classes",
    "ssl.engine.factory.class": "librdkafka runs no Java SSL engine factories",
}
_JAAS = re.compile(
    r"^\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)\s*(?P<options>.*?)\s*;?\s*$", re.S
)
_JAAS_OPTION = re.compile(r'\s*(?P<key>[\w.$-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;]+))')


def librdkafka_properties(properties: Mapping[str, str], *, what: str) -> dict[str, str]:
    """``properties`` with the Java client's security keys rewritten as librdkafka's (see the module docstring).

    Args:
        what: the connector (``"KafkaSource"``), the first word of every error.

    Raises:
        ConfigurationError: a JKS (or PKCS12 trust) store, an unparsable ``sasl.jaas.config``, a login module
            or key librdkafka cannot follow; the message names the key, its value (never a secret) and what
            to set instead.
    """
    given = {str(k): str(v) for k, v in properties.items()}
    out: dict[str, str] = {}
    translated: dict[str, str] = {}
    for key, value in given.items():
        if key in _DROPPED:
            _log.warning("%s: the Java client's %r has no librdkafka equivalent and is not used", what, key)
        elif key in _REFUSED:
            raise ConfigurationError(f"{what}: {key!r} cannot be used here: {_REFUSED[key]}")
        elif key == "sasl.jaas.config":
            translated.update(_jaas(value, what))
        elif key == "ssl.endpoint.identification.algorithm":
            translated[key] = value.strip() or "none"
        elif key.startswith(("ssl.truststore.", "ssl.keystore.")):
            pass  # below, with their store's type
        else:
            out[key] = value
    translated.update(_truststore(given, what))
    translated.update(_keystore(given, what))
    for key, value in translated.items():
        out.setdefault(key, value)  # librdkafka's own key, if given too, wins
    return out


def _jaas(config: str, what: str) -> dict[str, str]:
    match = _JAAS.match(config)
    if match is None:
        raise ConfigurationError(
            f"{what}: sasl.jaas.config is not a JAAS entry ('<LoginModule class> required key=\"value\" ...;'); "
            f"it starts {config[:40]!r}"
        )
    module, options = match["module"], _jaas_options(match["options"], what)
    if module in (_PLAIN_MODULE, _SCRAM_MODULE):
        missing = [k for k in ("username", "password") if k not in options]
        if missing:
            raise ConfigurationError(f"{what}: sasl.jaas.config's {module.rsplit('.', 1)[1]} lacks {missing}")
        return {"sasl.username": options["username"], "sasl.password": options["password"]}
    if module == _OAUTH_MODULE:
        if "clientId" in options or "clientSecret" in options:
            oidc = {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": options.get("clientId", "")}
            if "clientSecret" in options:
                oidc["sasl.oauthbearer.client.secret"] = options["clientSecret"]
            if "scope" in options:
                oidc["sasl.oauthbearer.scope"] = options["scope"]
            return oidc
        if "unsecuredLoginStringClaim_sub" not in options:
            raise ConfigurationError(
                f"{what}: sasl.jaas.config's OAuthBearerLoginModule has neither clientId/clientSecret (OIDC) nor "
                "unsecuredLoginStringClaim_sub (unsecured tokens); librdkafka needs one of them"
            )
        parts = [f"principal={options['unsecuredLoginStringClaim_sub']}"]
        if "unsecuredLoginListClaim_scope" in options or "unsecuredLoginStringClaim_scope" in options:
            scope = options.get("unsecuredLoginListClaim_scope") or options["unsecuredLoginStringClaim_scope"]
            parts.append(f"scope={scope.strip(',')}")
        if "unsecuredLoginLifetimeSeconds" in options:
            parts.append(f"lifeSeconds={options['unsecuredLoginLifetimeSeconds']}")
        return {"enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": " ".join(parts)}
    if module == _KERBEROS_MODULE:
        kerberos = {}
        if "principal" in options:
            kerberos["sasl.kerberos.principal"] = options["principal"]
        if "keyTab" in options:
            kerberos["sasl.kerberos.keytab"] = options["keyTab"]
        if "serviceName" in options:
            kerberos["sasl.kerberos.service.name"] = options["serviceName"]
        return kerberos
    raise ConfigurationError(
        f"{what}: sasl.jaas.config names the login module {module!r}, which librdkafka cannot run; supported: "
        f"{_PLAIN_MODULE}, {_SCRAM_MODULE}, {_OAUTH_MODULE}, {_KERBEROS_MODULE} (or librdkafka's own sasl.* keys)"
    )


def _jaas_options(text: str, what: str) -> dict[str, str]:
    options, position = {}, 0
    while position < len(text.rstrip()):
        match = _JAAS_OPTION.match(text, position)
        if match is None:
            raise ConfigurationError(
                f'{what}: sasl.jaas.config has an option that is not key=value or key="value" at '
                f"{text[position : position + 30]!r}"
            )
        value = match["quoted"] if match["quoted"] is not None else match["bare"]
        options[match["key"]] = re.sub(r"\\(.)", r"\1", value)
        position = match.end()
    return options


def _store_kind(given: Mapping[str, str], store: str) -> str | None:
    """The declared type of the ``ssl.<store>.*`` keys (upper case), or the one its file shows, or None."""
    declared = given.get(f"ssl.{store}.type")
    if declared:
        return declared.strip().upper()
    location = given.get(f"ssl.{store}.location")
    if location is None:
        return None
    try:
        head = Path(location).read_bytes()[:64]
    except OSError:
        return None  # not readable here (e.g. only on the cluster's machines): trust the keys as given
    if head.startswith(_JKS_MAGIC):
        return "JKS"
    return "PEM" if b"-----BEGIN" in head else "PKCS12"


def _truststore(given: Mapping[str, str], what: str) -> dict[str, str]:
    kind = _store_kind(given, "truststore")
    if "ssl.truststore.certificates" in given:
        return {"ssl.ca.pem": given["ssl.truststore.certificates"]}
    location = given.get("ssl.truststore.location")
    if location is None:
        return {}
    if kind in ("PEM", None):
        return {"ssl.ca.location": location}
    raise ConfigurationError(
        f"{what}: ssl.truststore.location={location!r} is a {kind} trust store; librdkafka reads PEM "
        "certificates only: export them (keytool -exportcert -rfc -keystore <store> -alias <alias> -file ca.pem) "
        "and set ssl.truststore.type=PEM with ssl.truststore.location=<ca.pem> (or ssl.truststore.certificates "
        "with the PEM text, or librdkafka's ssl.ca.location)"
    )


def _keystore(given: Mapping[str, str], what: str) -> dict[str, str]:
    kind = _store_kind(given, "keystore")
    keys: dict[str, str] = {}
    if "ssl.keystore.certificate.chain" in given:
        keys["ssl.certificate.pem"] = given["ssl.keystore.certificate.chain"]
    if "ssl.keystore.key" in given:
        keys["ssl.key.pem"] = given["ssl.keystore.key"]
    location = given.get("ssl.keystore.location")
    if location is None:
        return keys
    if kind == "PEM":
        keys.update({"ssl.certificate.location": location, "ssl.key.location": location})
    elif kind in ("PKCS12", None):  # librdkafka's ssl.keystore.location is a PKCS#12 file
        keys["ssl.keystore.location"] = location
        if "ssl.keystore.password" in given:
            keys["ssl.keystore.password"] = given["ssl.keystore.password"]
    else:
        raise ConfigurationError(
            f"{what}: ssl.keystore.location={location!r} is a {kind} key store; librdkafka reads PEM or PKCS12: "
            "convert it (keytool -importkeystore -srckeystore <store> -deststoretype PKCS12 -destkeystore "
            "client.p12) and set ssl.keystore.type=PKCS12, or use ssl.keystore.type=PEM with "
            "ssl.keystore.location (key and certificate in one PEM file) or ssl.keystore.certificate.chain and "
            "ssl.keystore.key"
        )
    return keys
