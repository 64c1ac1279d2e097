"""Read Prometheus text exposition with prometheus_client's own parser (tests assert values, not spelling)."""

from __future__ import annotations


def value(text: str, name: str, **labels: str) -> float | None:
    """The value of sample `name` with exactly `labels`, or None when absent."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and dict(sample.labels) == labels:
                return float(sample.value)
    return None


def types(text: str) -> dict[str, str]:
    """Family name -> TYPE as declared in the text."""
    from prometheus_client.parser import text_string_to_metric_families

    return {family.name: family.type for family in text_string_to_metric_families(text)}
