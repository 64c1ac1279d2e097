"""Prometheus exposition shared by every component: metric families, a text file, a push gateway.

The writer under the batch jobs' metrics (bkaudit.metrics) and AutoRecovery's (bkaudit.autorecovery.metrics);
naming rules are in bkaudit.metrics' docstring and docs/monitoring.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from bkaudit.errors import BkAuditError


class MetricsError(BkAuditError):
    """Metrics could not be written or pushed (the run itself is not failed by this)."""


class Families:
    """Metric families of one export, built from values a run already computed (no live instrumentation)."""

    def __init__(self) -> None:
        self._families: dict[str, Any] = {}

    def gauge(self, name: str, doc: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        from prometheus_client.core import GaugeMetricFamily

        self._add(
            name,
            lambda: GaugeMetricFamily(name, doc, labels=list(labels or {})),
            labels,
            lambda fam: fam.add_metric(list((labels or {}).values()), float(value)),
        )

    def counter(self, name: str, doc: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        """A counter; prometheus_client exposes it as `<name>_total`."""
        from prometheus_client.core import CounterMetricFamily

        self._add(
            name,
            lambda: CounterMetricFamily(name, doc, labels=list(labels or {})),
            labels,
            lambda fam: fam.add_metric(list((labels or {}).values()), float(value)),
        )

    def summary(
        self, name: str, doc: str, *, count: float, total: float, labels: Mapping[str, str] | None = None
    ) -> None:
        from prometheus_client.core import SummaryMetricFamily

        self._add(
            name,
            lambda: SummaryMetricFamily(name, doc, labels=list(labels or {})),
            labels,
            lambda fam: fam.add_metric(list((labels or {}).values()), count_value=count, sum_value=total),
        )

    def _add(self, name: str, make: Any, labels: Mapping[str, str] | None, add: Any) -> None:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = make()
        add(family)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._families.values())

    def registry(self) -> Any:
        """A CollectorRegistry holding exactly these families."""
        from prometheus_client import CollectorRegistry
        from prometheus_client.registry import Collector

        families = list(self._families.values())

        class _Fixed(Collector):
            def collect(self) -> Iterable[Any]:
                return iter(families)

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Fixed())
        return registry

    def render(self) -> str:
        """The Prometheus text exposition format (0.0.4)."""
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry())).decode("utf-8")

    def write_textfile(self, path: str) -> None:
        """Atomically replace `path` (node_exporter textfile collector)."""
        import os

        from prometheus_client import write_to_textfile

        try:
            directory = os.path.dirname(os.path.abspath(path))
            os.makedirs(directory, exist_ok=True)
            write_to_textfile(path, self.registry())
        except OSError as exc:
            raise MetricsError(f"cannot write metrics file {path}: {exc}") from exc

    def push(
        self,
        gateway_url: str,
        job: str,
        *,
        grouping: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        """PUT to `<gateway>/metrics/job/<job>[/<label>/<value>...]` (replaces that group's metrics)."""
        from prometheus_client import push_to_gateway

        try:
            push_to_gateway(
                gateway_url,
                job=job,
                registry=self.registry(),
                grouping_key=dict(grouping or {}),
                timeout=timeout_s,
            )
        except OSError as exc:  # urllib's URLError / HTTPError are OSErrors
            raise MetricsError(f"cannot push metrics to {gateway_url} (job {job}): {exc}") from exc


def export(families: Families, *, metrics_file: str = "", pushgateway_url: str = "", job: str) -> None:
    """Write and/or push; MetricsError names what failed (callers log it: metrics never fail a run)."""
    if metrics_file:
        families.write_textfile(metrics_file)
    if pushgateway_url:
        families.push(pushgateway_url, job)
