"""Before a job touches its warehouse: the Spark it runs on has the jars that warehouse needs, at versions
that work together.

Without this check a missing or mismatched jar shows up as a Java stack trace in the middle of a run
(`ClassNotFoundException: org.apache.hadoop.fs.s3a.S3AFileSystem`, a `NoSuchMethodError` deep in Delta's log
replay). Here it is one line naming both versions and the coordinates that fit, before anything is staged.

- Delta Lake's Spark jar is built for one Spark minor line (its POM's `spark-sql` version); on another line it
  fails at run time. `DELTA_SPARK_LINE` is read from Maven Central's POMs of io.delta:delta-spark_2.13.
- Hadoop's S3A connector (`hadoop-aws`) must be the exact Hadoop version of the Spark it runs in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bkaudit.errors import BkAuditError
from bkaudit.tables import location
from bkaudit.tables.read import DELTA_CLASS, DELTA_SESSION_CONF, delta_configured, jvm_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Delta Lake minor line -> the Spark minor line its delta-spark_2.13 POM declares (spark-sql_2.13 version)
DELTA_SPARK_LINE = {
    "3.3": "3.5", "4.0": "4.0", "4.1": "4.1", "4.2": "4.1", "4.3": "4.1", "4.4": "4.2",
}
S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
S3A_POM = "META-INF/maven/org.apache.hadoop/hadoop-aws/pom.properties"


class EngineMismatch(BkAuditError):
    """The session lacks a jar the warehouse needs, or has one built for another Spark or Hadoop."""


def _line(version: str) -> str:
    return ".".join(version.split(".")[:2])


def delta_for(spark_version: str) -> str | None:
    """The newest Delta Lake line built for this Spark's line, if the table knows one."""
    fits = [d for d, s in DELTA_SPARK_LINE.items() if s == _line(spark_version)]
    return max(fits, key=lambda v: tuple(int(p) for p in v.split("."))) if fits else None


def delta_problem(spark_version: str, delta_version: str | None, *, configured: bool) -> str | None:
    """Why Delta's jar cannot serve this Spark (None when it can, or when Delta is neither present nor
    asked for: bkaudit then reads through delta-rs)."""
    advice = delta_for(spark_version)
    wanted = (f"io.delta:delta-spark_2.13:{advice}.x (built for Spark {_line(spark_version)})" if advice
              else f"the delta-spark_2.13 release built for Spark {_line(spark_version)}")
    if delta_version is None:
        if not configured:
            return None
        return (f"the session is configured for Delta Lake ({', '.join(DELTA_SESSION_CONF)}) but no Delta "
                f"jar is on Spark {spark_version}'s classpath: add {wanted} to spark.jars")
    built_for = DELTA_SPARK_LINE.get(_line(delta_version))
    if built_for is None or built_for == _line(spark_version):
        return None
    return (f"Delta Lake {delta_version} is built for Spark {built_for}, but this is Spark {spark_version}: "
            f"use {wanted}")


def s3a_problem(hadoop_version: str, s3a_version: str | None, *, present: bool) -> str | None:
    """Why Spark cannot read `s3a://` here (None when it can)."""
    wanted = f"org.apache.hadoop:hadoop-aws:{hadoop_version} and the AWS SDK v2 it depends on"
    if not present:
        return (f"Spark cannot open s3a:// paths: hadoop-aws is not on the classpath of Hadoop "
                f"{hadoop_version}; add {wanted} to spark.jars")
    if s3a_version is not None and s3a_version != hadoop_version:
        return f"hadoop-aws {s3a_version} does not match this Spark's Hadoop {hadoop_version}: use {wanted}"
    return None


def require_engines(spark: SparkSession, warehouse: str | None) -> None:
    """Raise EngineMismatch (one line) when the session cannot serve `warehouse` with the jars it has."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        return
    configured = delta_configured(spark)
    delta = jvm_class(spark, DELTA_CLASS)
    if delta is None:
        problem = delta_problem(spark.version, None, configured=configured)
    else:  # a jar without a manifest version: nothing to compare
        version = _package_version(delta)
        problem = delta_problem(spark.version, version, configured=True) if version else None
    if problem is None and warehouse is not None and location.scheme(warehouse) == "s3":
        hadoop = str(jvm.org.apache.hadoop.util.VersionInfo.getVersion())
        s3a = jvm_class(spark, S3A_CLASS)
        problem = s3a_problem(hadoop, _pom_version(jvm, s3a, S3A_POM) if s3a is not None else None,
                              present=s3a is not None)
    if problem is not None:
        raise EngineMismatch(problem)


def _package_version(cls: Any) -> str | None:
    package = cls.getPackage()
    version = package.getImplementationVersion() if package is not None else None
    return str(version) if version else None


def _pom_version(jvm: Any, cls: Any, resource: str) -> str | None:
    """A Maven property file's version, from the jar that holds `cls` (its loader sees that jar)."""
    stream = cls.getClassLoader().getResourceAsStream(resource)
    if stream is None:
        return None
    try:
        props = jvm.java.util.Properties()
        props.load(stream)
        version = props.getProperty("version")
        return str(version) if version else None
    finally:
        stream.close()
