"""Object-store settings of a job (S3, Azure Blob / ADLS), parsed once from Flink's keys.

A job writes to storage through two clients: fsspec (``s3fs``, ``adlfs``) for
the Parquet files it stages, and delta-rs for Delta transactions. Both must
see the same endpoint and credentials, but they spell them differently.
:class:`StorageConfig` is parsed from the job's :class:`~flinklike_spark.config.Configuration`
(Flink's keys, at the edge) and derives, per URL, the options of each client:

================================================  ==============================  ==========================================
key                                               fsspec (s3fs / adlfs)           delta-rs ``storage_options``
================================================  ==============================  ==========================================
``s3.endpoint``                                   ``endpoint_url``                ``AWS_ENDPOINT_URL`` (+ ``AWS_ALLOW_HTTP``)
``s3.access-key`` / ``s3.secret-key``             ``key`` / ``secret``            ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``
``s3.session-token``                              ``token``                       ``AWS_SESSION_TOKEN``
``s3.region``                                     ``client_kwargs.region_name``   ``AWS_REGION``
``s3.path.style.access``                          ``addressing_style``            ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST`` (*)
``s3.proxy.host`` / ``s3.proxy.port``             ``config_kwargs.proxies``       ``AWS_PROXY_URL``
``fs.azure.account.key.<acct>.blob.core...``      ``account_name``/``account_key``  ``azure_storage_account_name``/``_key``
``fs.azure.account.endpoint.<acct>``              ``connection_string``           ``azure_storage_endpoint`` (+ allow http)
================================================  ==============================  ==========================================

(*) Virtual-hosted style (``s3.path.style.access: false``) with an explicit
endpoint: botocore (s3fs) and Arrow put the bucket in front of the endpoint's
host themselves, but delta-rs (object_store) uses the endpoint as the bucket's
own URL. For delta-rs the endpoint is therefore given per URL with the bucket
in its host (``https://s3.eu-west-1.amazonaws.com`` becomes
``https://my-bucket.s3.eu-west-1.amazonaws.com`` for ``s3://my-bucket/...``);
passing the plain endpoint made delta-rs drop the bucket from every request.

Keys left unset are not passed, so each client's own credential chain applies
(``AWS_*`` / ``AZURE_STORAGE_*`` environment variables, profiles, instance
metadata). Delta commits on S3 always use conditional puts
(``aws_conditional_put: etag``, an ``If-None-Match: *`` put of the log entry),
which AWS S3, MinIO, R2 and moto honour: two writers racing for one log
version cannot both win, so concurrent commits need no DynamoDB lock. On
Azure delta-rs always does so (``If-None-Match: *``) without an option.

Secrets (``s3.secret-key``, ``s3.session-token``, account keys) never appear
in ``repr`` or ``str`` of these objects.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import importlib.util
import re
from collections.abc import Mapping
from typing import Any, Final, Protocol, Self, runtime_checkable
from urllib.parse import urlsplit

from flinklike_spark.errors import ConfigurationError

__all__ = [
    "AzureAccount",
    "DeclaresStorageLocations",
    "S3Options",
    "StorageAccess",
    "StorageBound",
    "StorageConfig",
    "StorageLocation",
    "StorageOptions",
    "UsesStorage",
    "is_sensitive_key",
    "redact",
    "url_scheme",
]

S3_SCHEMES: Final = frozenset({"s3", "s3a"})
AZURE_SCHEMES: Final = frozenset({"az", "abfs", "abfss"})

#: scheme -> (fsspec package, the project extra that installs it or None)
_BACKENDS: Final = {
    **{s: ("s3fs", "s3") for s in S3_SCHEMES},
    **{s: ("adlfs", "azure") for s in AZURE_SCHEMES},
    "gs": ("gcsfs", None),
    "gcs": ("gcsfs", None),
}

# Flink's GlobalConfiguration.SENSITIVE_KEYS: a key containing one of these holds a secret.
_SENSITIVE_FRAGMENTS: Final = (
    "password", "secret", "fs.azure.account.key", "apikey", "api-key", "auth-params", "service-key", "token",
    "basic-auth", "jaas.config", "access_key", "account_key", "connection_string", "sas",
)  # fmt: skip
REDACTED: Final = "******"

_AZURE_KEY = re.compile(r"^fs\.azure\.account\.key\.(?P<account>[a-z0-9]{3,24})\.(?:blob|dfs)\.core\.windows\.net$")
_AZURE_ENDPOINT = re.compile(r"^fs\.azure\.account\.endpoint\.(?P<account>[a-z0-9]{3,24})$")


def is_sensitive_key(key: str) -> bool:
    """True when ``key`` (a Flink configuration key or a client option name) holds a secret."""
    lower = key.lower()
    return any(fragment in lower for fragment in _SENSITIVE_FRAGMENTS)


def redact(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``options`` with the values of sensitive keys (also in nested mappings) replaced."""
    return {
        key: REDACTED if is_sensitive_key(str(key)) else redact(value) if isinstance(value, Mapping) else value
        for key, value in options.items()
    }


def url_scheme(url: str) -> str:
    """The lower-case scheme of ``url`` ('' for a plain local path)."""
    head, sep, _ = str(url).partition("://")
    return head.lower() if sep else ""


def _secret_repr(value: str | None) -> str:
    return "None" if value is None else repr(REDACTED)


@dataclasses.dataclass(frozen=True, kw_only=True)
class S3Options:
    """Flink's ``s3.*`` keys. ``path_style_access`` None leaves the client's default."""

    endpoint: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    region: str | None = None
    path_style_access: bool | None = None
    proxy_host: str | None = None
    proxy_port: int | None = None

    def __post_init__(self) -> None:
        if (self.access_key is None) != (self.secret_key is None):
            given, missing = ("s3.access-key", "s3.secret-key") if self.secret_key is None else (
                "s3.secret-key", "s3.access-key")  # fmt: skip
            raise ConfigurationError(
                f"{given} is set but {missing} is not; give both, or neither to use the standard AWS "
                f"credential chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, profiles, instance metadata)"
            )
        if self.endpoint is not None and urlsplit(self.endpoint).scheme not in ("http", "https"):
            raise ConfigurationError(
                f"s3.endpoint: {self.endpoint!r} is not an http(s) URL; give e.g. 'https://s3.eu-west-1.amazonaws.com' "
                f"or 'http://127.0.0.1:9000'"
            )
        if (self.proxy_host is None) != (self.proxy_port is None):
            raise ConfigurationError(
                "s3.proxy.host and s3.proxy.port must be given together (an HTTP proxy, e.g. "
                "s3.proxy.host: proxy.example.com, s3.proxy.port: 3128)"
            )

    @property
    def proxy_url(self) -> str | None:
        """``http://<s3.proxy.host>:<s3.proxy.port>``, or None without a proxy."""
        return None if self.proxy_host is None else f"http://{self.proxy_host}:{self.proxy_port}"

    def bucket_endpoint(self, bucket: str) -> str | None:
        """The endpoint to give delta-rs for ``bucket``: with virtual-hosted requests, the bucket's own URL.

        object_store (delta-rs) sends virtual-hosted requests to the endpoint as
        given, so the bucket must be in its host; botocore and Arrow add it
        themselves and get the plain endpoint. An endpoint that already starts
        with the bucket is kept.
        """
        if self.endpoint is None or self.path_style_access is not False or not bucket:
            return self.endpoint
        parts = urlsplit(self.endpoint)
        if parts.netloc.lower().startswith(f"{bucket.lower()}."):
            return self.endpoint
        return parts._replace(netloc=f"{bucket}.{parts.netloc}").geturl()

    def __repr__(self) -> str:
        return (
            f"S3Options(endpoint={self.endpoint!r}, access_key={self.access_key!r}, "
            f"secret_key={_secret_repr(self.secret_key)}, session_token={_secret_repr(self.session_token)}, "
            f"region={self.region!r}, path_style_access={self.path_style_access!r}, "
            f"proxy_host={self.proxy_host!r}, proxy_port={self.proxy_port!r})"
        )

    __str__ = __repr__


@dataclasses.dataclass(frozen=True, kw_only=True)
class AzureAccount:
    """One storage account: ``fs.azure.account.key.<name>...`` and ``fs.azure.account.endpoint.<name>``."""

    name: str
    key: str | None = None
    endpoint: str | None = None  # blob service URL, e.g. Azurite's http://127.0.0.1:10000/devstoreaccount1

    def __repr__(self) -> str:
        return f"AzureAccount(name={self.name!r}, key={_secret_repr(self.key)}, endpoint={self.endpoint!r})"

    __str__ = __repr__


@dataclasses.dataclass(frozen=True, kw_only=True)
class StorageOptions:
    """What to pass for one URL: ``fsspec`` to ``fsspec.core.url_to_fs``, ``delta`` to deltalake."""

    fsspec: Mapping[str, Any]
    delta: Mapping[str, str]

    def __repr__(self) -> str:
        return f"StorageOptions(fsspec={redact(self.fsspec)!r}, delta={redact(self.delta)!r})"

    __str__ = __repr__


@dataclasses.dataclass(frozen=True, kw_only=True)
class StorageConfig:
    """The object-store settings of a job; picklable (it travels to TaskExecutors with sinks and layouts).

    Build it with :meth:`from_configuration` (or ``Configuration.storage``);
    the default instance sets nothing, so the clients' own credential chains apply.
    """

    s3: S3Options = dataclasses.field(default_factory=S3Options)
    azure: tuple[AzureAccount, ...] = ()

    @staticmethod
    def from_configuration(values: Mapping[str, Any]) -> StorageConfig:
        """Parse Flink's storage keys out of a configuration mapping (other keys are ignored).

        Raises:
            ConfigurationError: an incomplete or malformed setting (naming the key, never a secret).
        """
        s3 = S3Options(
            endpoint=values.get("s3.endpoint"),
            access_key=values.get("s3.access-key"),
            secret_key=values.get("s3.secret-key"),
            session_token=values.get("s3.session-token"),
            region=values.get("s3.region"),
            path_style_access=values.get("s3.path.style.access"),
            proxy_host=values.get("s3.proxy.host"),
            proxy_port=values.get("s3.proxy.port"),
        )
        keys: dict[str, str] = {}
        endpoints: dict[str, str] = {}
        for key, value in values.items():
            if (match := _AZURE_KEY.match(key)) is not None:
                keys[match["account"]] = str(value)
            elif (match := _AZURE_ENDPOINT.match(key)) is not None:
                if urlsplit(str(value)).scheme not in ("http", "https"):
                    raise ConfigurationError(
                        f"{key}: {value!r} is not an http(s) URL of a blob service, "
                        f"e.g. 'http://127.0.0.1:10000/{match['account']}'"
                    )
                endpoints[match["account"]] = str(value).rstrip("/")
        accounts = tuple(
            AzureAccount(name=name, key=keys.get(name), endpoint=endpoints.get(name))
            for name in sorted(keys.keys() | endpoints.keys())
        )
        return StorageConfig(s3=s3, azure=accounts)

    # -- per URL -----------------------------------------------------------------------------

    def options(
        self,
        url: str,
        *,
        delta: Mapping[str, str] | None = None,
        fsspec: Mapping[str, Any] | None = None,
    ) -> StorageOptions:
        """The fsspec and delta-rs options for ``url``, with explicit ones merged over the derived ones.

        Args:
            delta: a connector's explicit delta-rs ``storage_options``; they win, and
                the credentials and endpoint among them reach fsspec too.
            fsspec: a connector's explicit fsspec options; they win on the fsspec side.

        Raises:
            ConfigurationError: an Azure URL names no account and several are configured.
        """
        scheme = url_scheme(url)
        derived_fs: dict[str, Any] = {}
        derived_delta: dict[str, str] = {}
        if scheme in S3_SCHEMES:
            s3 = self._s3_with(delta or {})
            derived_fs, derived_delta = _s3_fsspec(s3), _s3_delta(s3, bucket=urlsplit(url).netloc)
        elif scheme in AZURE_SCHEMES:
            account = self._azure_account(url, delta or {})
            if account is not None:
                derived_fs, derived_delta = _azure_fsspec(account), _azure_delta(account)
        return StorageOptions(
            fsspec={**derived_fs, **dict(fsspec or {})},
            delta={**derived_delta, **{k: str(v) for k, v in (delta or {}).items()}},
        )

    def check_available(self, url: str, *, what: str) -> None:
        """Raise unless the fsspec package serving ``url``'s scheme is installed.

        Called on the client when a job is submitted, for every storage URL of
        the job, so that a missing package fails the submission (naming the URL
        and the extra to install) before any task is deployed.

        Raises:
            ConfigurationError: naming ``what`` (e.g. ``execution.checkpointing.dir``), the URL and the fix.
        """
        scheme = url_scheme(url)
        backend = _BACKENDS.get(scheme)
        if backend is None:
            return
        package, extra = backend
        try:
            found = importlib.util.find_spec(package) is not None
        except (ImportError, ValueError):  # a broken install, or a module blocked from importing
            found = False
        if found:
            return
        fix = f'pip install "flinklike-spark[{extra}]"' if extra else f"pip install {package}"
        raise ConfigurationError(
            f"{what} {url!r} is on {scheme}:// storage, which needs the package {package!r}; install it with "
            f"{fix} on the client and on every machine that runs TaskExecutors (the Spark executors)"
        )

    def _s3_with(self, delta: Mapping[str, str]) -> S3Options:
        upper = {k.upper(): v for k, v in delta.items()}
        changes = {
            field: upper[name]
            for name, field in (
                ("AWS_ENDPOINT_URL", "endpoint"),
                ("AWS_ACCESS_KEY_ID", "access_key"),
                ("AWS_SECRET_ACCESS_KEY", "secret_key"),
                ("AWS_SESSION_TOKEN", "session_token"),
                ("AWS_REGION", "region"),
            )
            if name in upper
        }
        return dataclasses.replace(self.s3, **changes) if changes else self.s3

    def _azure_account(self, url: str, delta: Mapping[str, str]) -> AzureAccount | None:
        lower = {k.lower(): v for k, v in delta.items()}
        netloc = urlsplit(url).netloc
        name = netloc.partition("@")[2].partition(".")[0] if "@" in netloc else None
        name = name or lower.get("azure_storage_account_name")
        by_name = {account.name: account for account in self.azure}
        if name is None:
            if len(self.azure) > 1:
                raise ConfigurationError(
                    f"{url!r} names no storage account and several are configured ({sorted(by_name)}); "
                    f"use abfss://<container>@<account>.dfs.core.windows.net/<path>"
                )
            if not self.azure:
                return None
            account = self.azure[0]
        else:
            account = by_name.get(name, AzureAccount(name=name))
        if "azure_storage_account_key" in lower:
            account = dataclasses.replace(account, key=lower["azure_storage_account_key"])
        if "azure_storage_endpoint" in lower:
            account = dataclasses.replace(account, endpoint=lower["azure_storage_endpoint"])
        return account


@runtime_checkable
class UsesStorage(Protocol):
    """A source or sink that reads or writes storage URLs (DeltaSink, FileSource, the Spark bridge...).

    When a job is submitted, the client calls :meth:`storage_urls` to check
    that every URL's filesystem package is installed, then replaces the
    connector in the job by ``with_storage(configuration.storage)``, so that the
    copy shipped to the TaskExecutors reaches its URLs with the job's settings
    (under any ``storage_options`` the connector was given explicitly).
    """

    def storage_urls(self) -> tuple[str, ...]:
        """The URLs (or local paths) this connector reads or writes."""
        ...

    def with_storage(self, storage: StorageConfig) -> Self:
        """A copy of this connector that applies ``storage`` to its URLs."""
        ...


class StorageBound:
    """The :class:`UsesStorage` plumbing that every storage connector shares: ``storage`` (None until the
    client binds the job's settings) and :meth:`with_storage`. A connector subclasses this and defines
    :meth:`storage_urls`; it reaches its URLs with ``self.storage or StorageConfig()``."""

    storage: StorageConfig | None = None

    def storage_urls(self) -> tuple[str, ...]:
        raise NotImplementedError(f"{type(self).__name__} must say which URLs it reads or writes")

    def with_storage(self, storage: StorageConfig) -> Self:
        """A shallow copy of this connector bound to ``storage``; this one is unchanged."""
        bound = copy.copy(self)
        bound.storage = storage
        return bound


class StorageAccess(enum.Enum):
    """What a job does with a location, which decides how it is probed when the job is submitted."""

    READ = "read"
    """It must exist and be listable (a restore path)."""
    WRITE = "write"
    """It is created if missing, and a marker is written into it and deleted (checkpoints, sinks)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class StorageLocation:
    """One place a job reads or writes, as the start-up probe checks it.

    Attributes:
        url: the URL or local path.
        what: the setting or connector naming it, for messages (``DeltaSink table``).
        access: read or write.
        options: the clients' options for ``url`` (explicit ones merged in).
        delta: delta-rs reaches it too (Delta tables at or under ``url``), so
            the probe also writes through delta-rs, whose client and options
            differ from fsspec's.
    """

    url: str
    what: str
    access: StorageAccess
    options: StorageOptions
    delta: bool = False


@runtime_checkable
class DeclaresStorageLocations(Protocol):
    """A (bound) connector that says which of its locations the start-up probe checks, and how.

    Connectors that implement only :class:`UsesStorage` are not probed: the
    probe cannot know their explicit options or whether they write.
    """

    def storage_locations(self) -> tuple[StorageLocation, ...]:
        """The locations to probe, with the options this connector reaches them with."""
        ...


def _s3_fsspec(s3: S3Options) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if s3.access_key is not None:
        options["key"], options["secret"] = s3.access_key, s3.secret_key
    if s3.session_token is not None:
        options["token"] = s3.session_token
    if s3.endpoint is not None:
        options["endpoint_url"] = s3.endpoint
    if s3.region is not None:
        options["client_kwargs"] = {"region_name": s3.region}
    config: dict[str, Any] = {}
    if s3.path_style_access is not None:
        config["s3"] = {"addressing_style": "path" if s3.path_style_access else "virtual"}
    if s3.proxy_url is not None:
        config["proxies"] = {"http": s3.proxy_url, "https": s3.proxy_url}
    if config:
        options["config_kwargs"] = config
    return options


def _s3_delta(s3: S3Options, *, bucket: str) -> dict[str, str]:
    # Conditional put makes concurrent commits safe without a lock service (see the module docstring).
    options = {"aws_conditional_put": "etag"}
    if s3.access_key is not None:
        options["AWS_ACCESS_KEY_ID"], options["AWS_SECRET_ACCESS_KEY"] = s3.access_key, s3.secret_key or ""
    if s3.session_token is not None:
        options["AWS_SESSION_TOKEN"] = s3.session_token
    if s3.endpoint is not None:
        options["AWS_ENDPOINT_URL"] = s3.bucket_endpoint(bucket) or s3.endpoint
        if s3.endpoint.lower().startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    if s3.proxy_url is not None:
        options["AWS_PROXY_URL"] = s3.proxy_url
    if s3.region is not None:
        options["AWS_REGION"] = s3.region
    if s3.path_style_access is not None:
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false" if s3.path_style_access else "true"
    return options


def _azure_fsspec(account: AzureAccount) -> dict[str, Any]:
    if account.endpoint is not None and account.key is not None:
        protocol = urlsplit(account.endpoint).scheme
        return {
            "connection_string": f"DefaultEndpointsProtocol={protocol};AccountName={account.name};"
            f"AccountKey={account.key};BlobEndpoint={account.endpoint};"
        }
    options: dict[str, Any] = {"account_name": account.name}
    if account.key is not None:
        options["account_key"] = account.key
    if account.endpoint is not None:
        options["account_host"] = urlsplit(account.endpoint).netloc
    return options


def _azure_delta(account: AzureAccount) -> dict[str, str]:
    options = {"azure_storage_account_name": account.name}
    if account.key is not None:
        options["azure_storage_account_key"] = account.key
    if account.endpoint is not None:
        options["azure_storage_endpoint"] = account.endpoint
        if account.endpoint.lower().startswith("http://"):
            options["azure_allow_http"] = "true"
    return options
