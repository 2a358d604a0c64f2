"""Arrow's native filesystem for a Delta table, from the table's URI and its delta-rs ``storage_options``.

delta-rs's ``to_pyarrow_dataset()`` reads through a Python filesystem handler:
Arrow's I/O threads call into Python, and one doing so while the interpreter
finalizes aborts the process ("terminate called without an active
exception", delta-io/delta-rs#2184, apache/arrow#34314). Reading through
Arrow's own filesystems (C++ only) avoids it; :func:`arrow_filesystem` gives
the one for a table:

* local paths and ``file://``: ``LocalFileSystem``;
* ``s3://``/``s3a://``: ``S3FileSystem`` with the endpoint (``endpoint_override``,
  ``scheme``), credentials, region, addressing style and proxy of the options;
* ``az://``/``abfs[s]://``: ``AzureFileSystem`` with the account, key and
  endpoint (blob/dfs authority and scheme, e.g. Azurite's).

Each is wrapped in a ``SubTreeFileSystem`` rooted at the table, which is what
``to_pyarrow_dataset(filesystem=...)`` expects. Options this module does not
translate (profiles, assumed roles, SAS tokens, service principals...) could
change how the store is reached, so for them it returns None and the caller
keeps delta-rs's handler.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from typing import Final

import pyarrow.fs as pafs

__all__ = ["arrow_filesystem"]

# object_store's aliases of the S3 keys we translate (it accepts each with or without "aws_").
_S3_ALIASES: Final = {
    "AWS_ENDPOINT": "AWS_ENDPOINT_URL",
    "AWS_TOKEN": "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION": "AWS_REGION",
}
_S3_TRANSLATED: Final = frozenset({
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL",
    "AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "AWS_PROXY_URL",
})  # fmt: skip
# Keys that change writes, retries or timeouts only, not where or as whom a read goes.
_S3_IGNORED: Final = frozenset({
    "AWS_ALLOW_HTTP", "AWS_CONDITIONAL_PUT", "AWS_S3_ALLOW_UNSAFE_RENAME", "AWS_COPY_IF_NOT_EXISTS",
    "AWS_S3_LOCKING_PROVIDER", "AWS_TIMEOUT", "AWS_CONNECT_TIMEOUT", "AWS_MAX_RETRIES", "AWS_RETRY_TIMEOUT",
    "AWS_POOL_IDLE_TIMEOUT", "AWS_UNSIGNED_PAYLOAD", "AWS_CHECKSUM_ALGORITHM",
})  # fmt: skip
_AZURE_ALIASES: Final = {
    "ACCOUNT_NAME": "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_NAME": "AZURE_STORAGE_ACCOUNT_NAME",
    "ACCOUNT_KEY": "AZURE_STORAGE_ACCOUNT_KEY",
    "ACCESS_KEY": "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY": "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY": "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_MASTER_KEY": "AZURE_STORAGE_ACCOUNT_KEY",
    "ENDPOINT": "AZURE_STORAGE_ENDPOINT",
    "AZURE_STORAGE_ENDPOINT": "AZURE_STORAGE_ENDPOINT",
    "AZURE_ENDPOINT": "AZURE_STORAGE_ENDPOINT",
}
_AZURE_IGNORED: Final = frozenset({
    "AZURE_ALLOW_HTTP", "ALLOW_HTTP", "TIMEOUT", "CONNECT_TIMEOUT", "MAX_RETRIES", "RETRY_TIMEOUT",
})  # fmt: skip
_TRUE: Final = frozenset({"true", "1", "yes", "on"})


def arrow_filesystem(table_uri: str, storage_options: Mapping[str, str] | None = None) -> pafs.FileSystem | None:
    """Arrow's native filesystem rooted at the Delta table ``table_uri``, or None where it cannot stand in.

    Args:
        table_uri: ``DeltaTable.table_uri`` (a local path, ``file://``, ``s3://``, ``az://``...).
        storage_options: the delta-rs options the table was opened with.

    Returns:
        A ``SubTreeFileSystem`` over a native filesystem, or None for another
        scheme (``gs://``...) or options this module does not translate.
    """
    options = dict(storage_options or {})
    parts = urllib.parse.urlsplit(table_uri)
    scheme = parts.scheme.lower() if "://" in table_uri else ""
    if scheme in ("", "file"):
        path = urllib.parse.unquote(table_uri.removeprefix("file://")) if scheme else table_uri
        return pafs.SubTreeFileSystem(path.rstrip("/"), pafs.LocalFileSystem())
    key = urllib.parse.unquote(parts.path).strip("/")
    if scheme in ("s3", "s3a"):
        filesystem = _s3(parts.netloc, options)
        return None if filesystem is None else pafs.SubTreeFileSystem(f"{parts.netloc}/{key}".rstrip("/"), filesystem)
    if scheme in ("az", "abfs", "abfss", "azure"):
        container, _, host = parts.netloc.partition("@")
        account = host.partition(".")[0] or None
        filesystem = _azure(account, options)
        return None if filesystem is None else pafs.SubTreeFileSystem(f"{container}/{key}".rstrip("/"), filesystem)
    return None


def _s3(bucket: str, options: Mapping[str, str]) -> pafs.S3FileSystem | None:
    given: dict[str, str] = {}
    for name, value in options.items():
        upper = str(name).upper()
        upper = upper if upper.startswith("AWS_") else f"AWS_{upper}"
        upper = _S3_ALIASES.get(upper, upper)
        if upper in _S3_TRANSLATED:
            given.setdefault(upper, str(value))
        elif upper not in _S3_IGNORED:
            return None
    # as object_store, fall back to the environment for the endpoint and the style (Arrow reads
    # credentials and region from the environment itself)
    for variable in ("AWS_ENDPOINT_URL", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST"):
        if variable not in given and os.environ.get(variable):
            given[variable] = os.environ[variable]
    kwargs: dict[str, object] = {}
    if "AWS_ACCESS_KEY_ID" in given:
        kwargs["access_key"] = given["AWS_ACCESS_KEY_ID"]
        kwargs["secret_key"] = given.get("AWS_SECRET_ACCESS_KEY", "")
        if "AWS_SESSION_TOKEN" in given:
            kwargs["session_token"] = given["AWS_SESSION_TOKEN"]
    if "AWS_REGION" in given:
        kwargs["region"] = given["AWS_REGION"]
    virtual = given.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "").lower() in _TRUE
    if "AWS_ENDPOINT_URL" in given:
        endpoint = urllib.parse.urlsplit(given["AWS_ENDPOINT_URL"])
        host = endpoint.netloc
        if virtual and host.lower().startswith(f"{bucket.lower()}."):
            host = host[len(bucket) + 1 :]  # object_store's virtual-hosted endpoint is the bucket's own URL
        kwargs["endpoint_override"] = host + endpoint.path.rstrip("/")
        kwargs["scheme"] = endpoint.scheme or "https"
    if virtual:
        kwargs["force_virtual_addressing"] = True
    if "AWS_PROXY_URL" in given:
        kwargs["proxy_options"] = given["AWS_PROXY_URL"]
    return pafs.S3FileSystem(**kwargs)


def _azure(account: str | None, options: Mapping[str, str]) -> pafs.FileSystem | None:
    if not hasattr(pafs, "AzureFileSystem"):  # pyarrow built without Azure support
        return None
    given: dict[str, str] = {}
    for name, value in options.items():
        upper = str(name).upper()
        canonical = _AZURE_ALIASES.get(upper) or _AZURE_ALIASES.get(upper.removeprefix("AZURE_"))
        if canonical is not None:
            given.setdefault(canonical, str(value))
        elif upper not in _AZURE_IGNORED and upper.removeprefix("AZURE_") not in _AZURE_IGNORED:
            return None
    account = account or given.get("AZURE_STORAGE_ACCOUNT_NAME") or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
    if not account:
        return None
    kwargs: dict[str, object] = {}
    key = given.get("AZURE_STORAGE_ACCOUNT_KEY") or os.environ.get("AZURE_STORAGE_ACCOUNT_KEY")
    if key:
        kwargs["account_key"] = key
    if "AZURE_STORAGE_ENDPOINT" in given:
        endpoint = urllib.parse.urlsplit(given["AZURE_STORAGE_ENDPOINT"])
        kwargs["blob_storage_authority"] = kwargs["dfs_storage_authority"] = endpoint.netloc
        kwargs["blob_storage_scheme"] = kwargs["dfs_storage_scheme"] = endpoint.scheme or "https"
    return pafs.AzureFileSystem(account, **kwargs)
