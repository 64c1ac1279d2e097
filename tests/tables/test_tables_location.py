"""The warehouse URI layer and the Delta stats format, without any server (pure mapping and arithmetic)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from bkaudit import config
from bkaudit.errors import ConfigError
from bkaudit.tables import location
from bkaudit.tables.location import Warehouse
from bkaudit.tables.settings import ENV, TablesSettings
from bkaudit.tables.stats import FileStats, json_value


def test_schemes_and_joins(tmp_path: Path) -> None:
    assert location.normalize("s3a://bucket/wh") == "s3://bucket/wh"
    assert location.normalize("s3n://bucket/wh") == "s3://bucket/wh"
    assert location.normalize("gcs://b/wh") == "gs://b/wh"
    assert location.normalize("abfss://c@acct.dfs.core.windows.net/wh") == "abfss://c@acct.dfs.core.windows.net/wh"
    assert location.normalize(f"file://{tmp_path}") == str(tmp_path)
    assert location.join("s3a://bucket/wh/", "violations") == "s3://bucket/wh/violations"
    assert location.join("relative/wh", "t") == str(Path("relative/wh/t").resolve())
    assert location.resolve("s3://b/wh/t", "run_date=x/f.parquet") == "s3://b/wh/t/run_date=x/f.parquet"
    assert location.is_local("/x") and location.is_local("file:///x") and not location.is_local("gs://b")


def test_s3_filesystem_from_delta_rs_options() -> None:
    wh = Warehouse("s3a://bucket/wh", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "aws_access_key_id": "k",
                                       "aws_secret_access_key": "s", "aws_region": "eu-west-1"})
    fs, path = location.filesystem(wh.table("violations"), options=wh.options)
    assert isinstance(fs, pafs.S3FileSystem) and path == "bucket/wh/violations"
    assert fs.region == "eu-west-1"
    assert "127.0.0.1:9000" in repr(fs.__reduce__())  # the endpoint reached pyarrow
    assert location.storage_options("s3://bucket/wh", options=wh.options) == {
        "aws_endpoint_url": "http://127.0.0.1:9000", "aws_access_key_id": "k", "aws_secret_access_key": "s",
        "aws_region": "eu-west-1",
    }
    assert location.storage_options("/local/wh", options=wh.options) is None


def test_options_reach_workers_in_their_tasks_and_the_operators_variable_is_read(monkeypatch: Any) -> None:
    """Workers get the options inside what the driver ships (the Warehouse pickles); the environment
    variable BKAUDIT_STORAGE_OPTIONS is an operator's input where settings are resolved, never written."""
    import os
    import pickle

    monkeypatch.setenv(ENV, json.dumps({"aws_region": "us-east-2"}))
    raw = os.environ[ENV]
    wh = pickle.loads(pickle.dumps(TablesSettings().warehouse("s3://b")))  # a Spark worker's copy
    assert location.storage_options("s3://b", options=wh.options) == {"aws_region": "us-east-2"}
    assert os.environ[ENV] == raw  # read, not written
    given = TablesSettings(storage_options={"aws_region": "eu-west-1"}).warehouse("s3://b")
    assert given.options == {"aws_region": "eu-west-1"}  # the settings file's options win
    monkeypatch.setenv(ENV, "not json")
    with pytest.raises(ConfigError):
        TablesSettings().warehouse("s3://b")
    monkeypatch.delenv(ENV)
    assert location.storage_options("s3://b", options=TablesSettings().warehouse("s3://b").options) is None


def test_two_warehouses_side_by_side_keep_their_own_options(tmp_path: Path) -> None:
    """No module state: two stores with different options, used in turn and at once, each keeps its own."""
    from concurrent.futures import ThreadPoolExecutor

    from bkaudit.tables.store import StagingWriter

    a = Warehouse("s3://a/wh", {"aws_endpoint_url": "http://127.0.0.1:9001", "aws_region": "eu-west-1"})
    b = Warehouse("s3://b/wh", {"aws_endpoint_url": "http://127.0.0.1:9002", "aws_region": "us-east-2"})
    local = Warehouse(str(tmp_path))

    def seen(wh: Warehouse) -> tuple[str, str, dict[str, str] | None]:
        fs, _ = location.filesystem(wh.table("violations"), options=wh.options)
        return fs.region, repr(fs.__reduce__()), location.storage_options(wh.uri, options=wh.options)

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(seen, [a, b, a, b]))
    for (region, reduced, options), wh, port in zip(got, [a, b, a, b], ["9001", "9002"] * 2, strict=True):
        assert region == wh.options["aws_region"] and f"127.0.0.1:{port}" in reduced
        assert options == dict(wh.options)
    writer_a = StagingWriter(a, "violations", snapshot_id="s", snapshot_date="2026-11-24")
    writer_b = StagingWriter(b, "violations", snapshot_id="s", snapshot_date="2026-11-24")
    assert (writer_a.options, writer_b.options) == (a.options, b.options)
    assert writer_a.uri == "s3://a/wh/violations" and writer_b.uri == "s3://b/wh/violations"
    assert location.storage_options(local.uri, options=a.options) is None  # a local path needs none
    assert not hasattr(location, "configure") and not hasattr(location, "_options")


def test_azure_and_gcs_paths() -> None:
    azure = {"azure_storage_account_key": "a2V5"}
    fs, path = location.filesystem("abfss://container@acct.dfs.core.windows.net/wh/t", options=azure)
    assert isinstance(fs, pafs.AzureFileSystem) and path == "container/wh/t"
    fs, path = location.filesystem("gs://bucket/wh", options={"google_skip_signature": "true"})
    assert isinstance(fs, pafs.GcsFileSystem) and path == "bucket/wh"


def test_tables_settings(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(
        "[tables]\nstorage_options = { aws_allow_http = true, port = 9000 }\nretention_hours = 24\n"
    )
    settings = config.load(path=conf, environ={})
    t = settings.get(TablesSettings)
    assert t.options() == {"aws_allow_http": "true", "port": "9000"} and t.retention_hours == 24
    conf.write_text("[tables]\nkeep_run_days = -1\n")
    with pytest.raises(ConfigError):
        config.load(path=conf, environ={}).get(TablesSettings)


def test_stats_format_and_bounds() -> None:
    schema = pa.schema([
        ("b", pa.bool_()), ("ts", pa.timestamp("us", tz="UTC")), ("s", pa.string()), ("i", pa.int32()),
        ("l", pa.list_(pa.string())), ("st", pa.struct([("x", pa.int64())])),
    ])
    stats = FileStats(schema)
    long = "y" * 40
    stats.update(pa.table({
        "b": [True, None], "ts": [datetime(2026, 1, 1, 0, 0, 0, 1500, tzinfo=UTC), None], "s": [long, "a"],
        "i": [3, 7], "l": [["q"], None], "st": [{"x": 5}, None],
    }, schema=schema))
    out = json.loads(stats.to_json())
    assert out["numRecords"] == 2
    assert out["minValues"] == {"b": True, "ts": "2026-01-01T00:00:00.001Z", "s": "a", "i": 3, "st": {"x": 5}}
    assert out["maxValues"]["ts"] == "2026-01-01T00:00:00.002Z"  # rounded up: still an upper bound
    assert out["maxValues"]["s"] == "y" * 32 + "\U0010ffff" and out["maxValues"]["s"] > long
    assert out["nullCount"] == {"b": 1, "ts": 1, "s": 0, "i": 0, "st": {"x": 1}}  # lists get none
    assert json_value(json_value(long, upper=True), upper=True) == json_value(long, upper=True)


def test_shipped_conf_documents_the_tables_defaults() -> None:
    loaded = config.load(path=config.DEFAULT_PATH, environ={})
    assert "tables" in loaded.raw()
    assert loaded.get(TablesSettings) == TablesSettings()


def test_only_a_scheme_followed_by_slashes_makes_a_uri(tmp_path: Path) -> None:
    """A local directory whose name has ':' stays local (urlsplit alone would read a scheme in it)."""
    odd = str(tmp_path / "wh:2026")
    assert location.split(odd) == ("", odd) and location.is_local(odd)
    assert location.split("S3A://bucket/wh") == ("s3", "bucket/wh")
    assert location.is_absolute("gs://b/x") and location.is_absolute("/abs")
    assert not location.is_absolute("p/x")
    assert location.resolve("s3://b/t", "part-0.parquet") == "s3://b/t/part-0.parquet"


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("http://127.0.0.1:9000", {"endpoint_override": "127.0.0.1:9000", "scheme": "http"}),
        ("https://minio.example:443/", {"endpoint_override": "minio.example:443", "scheme": "https"}),
        ("minio:9000", {"endpoint_override": "minio:9000"}),
        (None, {}),
    ],
)
def test_endpoint_options_become_pyarrow_endpoint_override_and_scheme(
    endpoint: str | None, expected: dict[str, object]
) -> None:
    assert location._endpoint(endpoint) == expected
