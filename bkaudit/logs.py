"""How chatty a bkaudit process is: quiet by default, more with -v / -vv (or BKAUDIT_LOG_LEVEL).

By default only bkaudit's own warnings and errors reach stderr; the libraries' routine chatter (kazoo's
"Connection dropped" retries, py4j's gateway, Spark's start-up banner and log4j lines) is shown with -v.
"""

from __future__ import annotations

import logging
import os
from importlib import resources

# libraries whose INFO/WARNING lines are routine noise for a person running a command
NOISY = ("kazoo", "py4j", "pyspark", "great_expectations", "urllib3", "matplotlib", "deltalake", "grpc")


def configure(verbosity: int = 0) -> None:
    """0: bkaudit WARNING, libraries ERROR; 1: bkaudit INFO, libraries WARNING; 2+: everything DEBUG."""
    explicit = os.environ.get("BKAUDIT_LOG_LEVEL")
    own = explicit or ("WARNING" if verbosity <= 0 else "INFO" if verbosity == 1 else "DEBUG")
    libraries = "ERROR" if verbosity <= 0 else "WARNING" if verbosity == 1 else "DEBUG"
    # levels only: services (`bookie run`, `autorecovery run`) still install their own handler and format
    logging.getLogger().setLevel(own)
    for name in NOISY:
        logging.getLogger(name).setLevel(libraries)
    global VERBOSITY
    VERBOSITY = verbosity


VERBOSITY = 0
"""Set by `configure` (the CLI's -v count); 0 keeps the Spark driver JVM this process launches quiet."""


def spark_java_options() -> str | None:
    """Driver JVM options for a quiet local Spark session, or None with -v (Spark's own log4j defaults).

    Spark logs through log4j2 before any setLogLevel can run, so the configuration goes in at JVM launch.
    """
    if VERBOSITY > 0:
        return None
    config = resources.files("bkaudit.spark").joinpath("log4j2-quiet.properties")
    return f"-Dlog4j2.configurationFile=file:{config}"


__all__ = ["NOISY", "VERBOSITY", "configure", "spark_java_options"]
