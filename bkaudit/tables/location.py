"""Where the warehouse lives: one URI layer for local paths and object stores (S3, GCS, Azure).

Every place that turns a warehouse string into a table location, a pyarrow filesystem or delta-rs storage
options goes through here, so `s3a://` (Hadoop's spelling, the one Spark users write) and `s3://` mean the
same bucket everywhere, and the options configured once in `[tables] storage_options` reach both delta-rs
(commits, reads, vacuum) and pyarrow (staged Parquet files, Spark-free reads).

- local paths (and `file://`) are made absolute: executors may run in another working directory;
- `s3a://` and `s3n://` become `s3://`; `gs://`, `gcs://`, `abfss://`, `abfs://`, `az://` pass through;
- storage options use delta-rs's keys (`aws_endpoint_url`, `aws_access_key_id`, `aws_region`,
  `aws_allow_http`, `aws_conditional_put`, `azure_storage_account_name`, ...); the same keys are mapped to
  pyarrow's S3/GCS/Azure filesystems. Credentials left out are taken from the usual environment variables
  (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, AZURE_*), which both libraries read.

The options are a value, never process state: `Warehouse(uri, options)` is built once where settings are
resolved (`TablesSettings.warehouse`) and handed on, to Spark executors too inside what the driver ships them
(it pickles); the functions here that reach a store take the options they use (`options=`). Where a
warehouse is taken, a plain URI string is a warehouse without options (`Warehouse.of`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from bkaudit.errors import ConfigError

_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}
_OBJECT_STORES = {"s3", "gs", "abfss", "abfs", "az", "adl", "azure"}

StorageOptions = Mapping[str, str]  # delta-rs storage options (its key names)


@dataclass(frozen=True)
class Warehouse:
    """A warehouse location and the storage options of its store, handed from settings to every reader and
    writer (executors get it in their task's closure): two warehouses in one process never share options."""

    uri: str
    options: StorageOptions = field(default_factory=dict, repr=False)  # secrets: never in a repr

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", _keys_lowered(self.options))

    @classmethod
    def of(cls, warehouse: Warehouse | str) -> Warehouse:
        """`warehouse` as given, or a plain URI as a warehouse without storage options (credentials from the
        libraries' own environment variables)."""
        return warehouse if isinstance(warehouse, Warehouse) else cls(warehouse)

    def table(self, name: str) -> str:
        """`<uri>/<name>`: an absolute local path, or a URI with `s3a://` spelled `s3://`."""
        return join(self.uri, name)

    def __str__(self) -> str:  # messages name the location, never the options (they may hold secrets)
        return self.uri

    def __bool__(self) -> bool:  # "" names no warehouse, as the plain string did
        return bool(self.uri)


def storage_options(uri: str, *, options: StorageOptions | None) -> dict[str, str] | None:
    """The delta-rs storage options for `uri` (None for local paths or when there are none)."""
    if is_local(uri):
        return None
    return _keys_lowered(options or {}) or None


def _keys_lowered(options: StorageOptions) -> dict[str, str]:
    """delta-rs reads option keys in any case; pyarrow's mapping here looks them up in lower case."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def split(uri: str) -> tuple[str, str]:
    """(scheme after aliasing, the rest after `://`); ('', uri) for a plain local path.

    The one place a warehouse string is taken apart: a local directory name may contain ':' ("wh:2026"), so
    only `<scheme>://` makes a URI (urlsplit would read "wh" as a scheme).
    """
    raw, sep, rest = uri.partition("://")
    if not sep:
        return "", uri
    raw = raw.lower()
    return _ALIASES.get(raw, raw), rest


def scheme(uri: str) -> str:
    """The URI's scheme after aliasing ('' for a local path)."""
    return split(uri)[0]


def is_local(uri: str) -> bool:
    return scheme(uri) in ("", "file")


def normalize(uri: str) -> str:
    """The canonical spelling: absolute local path, or `<scheme>://...` with s3a/s3n mapped to s3."""
    s, rest = split(uri)
    if s == "":
        return os.path.abspath(uri)
    if s == "file":
        return os.path.abspath(rest if rest.startswith("/") else "/" + rest)
    return f"{s}://{rest}"


def join(base: str, *parts: str) -> str:
    """`base/part/...` for local paths and URIs alike (base normalized)."""
    root = normalize(base)
    tail = "/".join(p.strip("/") for p in parts if p)
    if not tail:
        return root
    return os.path.join(root, tail) if is_local(root) else f"{root.rstrip('/')}/{tail}"


def spark_uri(uri: str) -> str:
    """A location as Spark's Hadoop filesystems spell it (S3 is `s3a://` there)."""
    s, rest = split(uri)
    return f"s3a://{rest}" if s == "s3" else uri


def read_parquet(uri: str, *, options: StorageOptions | None, **kwargs: Any) -> pa.Table:
    """`pyarrow.parquet.read_table` of a file or directory at `uri`, through the store of `options` (a bare
    `s3://` string would make pyarrow use its defaults, not `[tables] storage_options`)."""
    import pyarrow.parquet as pq

    fs, path = filesystem(uri, options=options)
    return pq.read_table(path, filesystem=fs, **kwargs)


def is_absolute(path: str) -> bool:
    """A URI or an absolute local path (a Delta add-action path is otherwise relative to its table)."""
    return bool(scheme(path)) or path.startswith("/")


def resolve(uri: str, path: str) -> str:
    """A Delta add-action path (relative to the table, or absolute) as a full location."""
    return normalize(path) if is_absolute(path) else join(uri, path)


def paths_within(
    uri: str, paths: list[str], *, options: StorageOptions | None
) -> tuple[pafs.FileSystem, list[str]]:
    """One filesystem for table `uri` and Delta add-action `paths` (relative or absolute) as paths in it."""
    fs, root = filesystem(uri, options=options)
    out = [
        filesystem(p, options=options)[1] if is_absolute(p) else f"{root}/{p}"  # absolute paths are rare
        for p in paths
    ]
    return fs, out


def filesystem(uri: str, *, options: StorageOptions | None) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path inside it) for a local path or object-store URI, with `options`."""
    s = scheme(uri)
    if s in ("", "file"):
        return pafs.LocalFileSystem(), normalize(uri)
    norm = normalize(uri)
    options = storage_options(norm, options=options) or {}
    parts = urlsplit(norm)
    if s == "s3":
        return _s3(options), f"{parts.netloc}{parts.path}".rstrip("/")
    if s == "gs":
        return _gcs(options), f"{parts.netloc}{parts.path}".rstrip("/")
    if s in ("abfss", "abfs"):
        container, _, host = parts.netloc.partition("@")
        account = host.split(".", 1)[0] if host else None
        return _azure(options, account), f"{container}{parts.path}".rstrip("/")
    fs, path = pafs.FileSystem.from_uri(norm)
    return fs, path


def exists(uri: str, *, options: StorageOptions | None) -> bool:
    fs, path = filesystem(uri, options=options)
    return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)


def makedirs(uri: str) -> None:
    """Create a directory (object stores have none: a no-op there)."""
    if is_local(uri):
        os.makedirs(normalize(uri), exist_ok=True)


def remove_tree(uri: str, *, options: StorageOptions | None) -> None:
    """Delete a directory and everything under it (best effort)."""
    fs, path = filesystem(uri, options=options)
    try:
        fs.delete_dir(path)
    except (OSError, FileNotFoundError):
        pass


def _truthy(value: str | None) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")


def _pick(options: Mapping[str, str], *keys: str) -> str | None:
    for k in keys:
        if options.get(k):
            return options[k]
    return None


def _endpoint(endpoint: str | None) -> dict[str, object]:
    """pyarrow's endpoint_override (host:port) and scheme from an endpoint option ("http://minio:9000")."""
    if not endpoint:
        return {}
    parts = urlsplit(endpoint if "//" in endpoint else "//" + endpoint)
    out: dict[str, object] = {"endpoint_override": f"{parts.netloc}{parts.path}".rstrip("/")}
    if parts.scheme:
        out["scheme"] = parts.scheme
    return out


@dataclass(frozen=True)
class _S3:
    """S3 settings read once from delta-rs's option keys (and their aliases), for pyarrow and for S3A."""

    key: str | None
    secret: str | None
    token: str | None
    region: str | None
    endpoint: str | None
    http: bool
    virtual_hosted: bool

    @classmethod
    def of(cls, options: Mapping[str, str]) -> _S3:
        key = _pick(options, "aws_access_key_id", "access_key_id")
        secret = _pick(options, "aws_secret_access_key", "secret_access_key")
        return cls(
            key=key if key and secret else None,
            secret=secret if key and secret else None,
            token=_pick(options, "aws_session_token", "session_token", "aws_token", "token") if key and secret
            else None,
            region=_pick(options, "aws_region", "region", "aws_default_region"),
            endpoint=_pick(options, "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint"),
            http=_truthy(_pick(options, "aws_allow_http", "allow_http")),
            virtual_hosted=_truthy(_pick(options, "aws_virtual_hosted_style_request",
                                         "virtual_hosted_style_request")),
        )


def _s3(options: Mapping[str, str]) -> pafs.FileSystem:
    s3 = _S3.of(options)
    kwargs: dict[str, object] = {}
    if s3.key and s3.secret:
        kwargs.update(access_key=s3.key, secret_key=s3.secret)
        if s3.token:
            kwargs["session_token"] = s3.token
    if s3.region:
        kwargs["region"] = s3.region
    kwargs.update(_endpoint(s3.endpoint))
    if s3.http and "scheme" not in kwargs:
        kwargs["scheme"] = "http"
    if s3.virtual_hosted:
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs)


def hadoop_s3a(options: Mapping[str, str] | None) -> dict[str, str]:
    """The same S3 settings as Hadoop S3A configuration keys (`fs.s3a.*`), for Spark's reads of `s3a://`.

    An endpoint other than AWS's is addressed path-style unless the options ask for virtual hosts, as
    delta-rs and pyarrow do; credentials left out stay with S3A's own chain (environment, instance roles).
    """
    s3 = _S3.of(options or {})
    conf: dict[str, str] = {}
    if s3.key and s3.secret:
        conf.update({"fs.s3a.access.key": s3.key, "fs.s3a.secret.key": s3.secret})
        if s3.token:
            conf["fs.s3a.session.token"] = s3.token
            conf["fs.s3a.aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider")
    if s3.region:
        conf["fs.s3a.endpoint.region"] = s3.region
    if s3.endpoint:
        parts = urlsplit(s3.endpoint if "//" in s3.endpoint else "//" + s3.endpoint)
        http = parts.scheme == "http" or (not parts.scheme and s3.http)
        conf["fs.s3a.endpoint"] = f"{'http' if http else 'https'}://{parts.netloc}{parts.path}".rstrip("/")
        conf["fs.s3a.connection.ssl.enabled"] = str(not http).lower()
        conf["fs.s3a.path.style.access"] = str(not s3.virtual_hosted).lower()
    return conf


def _gcs(options: Mapping[str, str]) -> pafs.FileSystem:
    kwargs: dict[str, object] = {}
    kwargs.update(_endpoint(_pick(options, "google_endpoint", "gcs_endpoint", "endpoint")))
    if _truthy(_pick(options, "google_skip_signature", "anonymous")):
        kwargs["anonymous"] = True
    return pafs.GcsFileSystem(**kwargs)


def _azure(options: Mapping[str, str], account: str | None) -> pafs.FileSystem:
    name = _pick(options, "azure_storage_account_name", "account_name") or account
    if not name:
        raise ConfigError("tables.storage_options", "an abfss:// warehouse needs an account name")
    kwargs: dict[str, object] = {"account_name": name}
    key = _pick(options, "azure_storage_account_key", "account_key", "access_key")
    if key:
        kwargs["account_key"] = key
    return pafs.AzureFileSystem(**kwargs)
