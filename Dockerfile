# bkaudit: the CLI, the spark-submit jobs and a local Spark, in one image (docs/deployment.md).
#   make dist && docker build -t bkaudit:0.1.0 .
#   docker run --rm bkaudit:0.1.0 violations --warehouse s3://bucket/bkaudit --json
# For a cluster that brings its own Spark, install the wheel without the [spark] extra instead.
FROM python:3.11-slim-bookworm

# Java 17 for Spark's driver and the embedded ZooKeeper (bkaudit zk start)
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64

WORKDIR /opt/bkaudit
COPY dist/*.whl /tmp/wheels/
COPY jobs/ /opt/bkaudit/jobs/
COPY conf/bkaudit.toml /opt/bkaudit/conf/bkaudit.toml

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3013
RUN wheel="$(find /tmp/wheels -name 'bkaudit-*.whl' | head -n 1)" \
    && pip install --no-cache-dir "${wheel}[spark]" \
    && rm -rf /tmp/wheels

RUN useradd --create-home --uid 10001 bkaudit
USER 10001
ENV BKAUDIT_CONF=/opt/bkaudit/conf/bkaudit.toml

ENTRYPOINT ["bkaudit"]
CMD ["--help"]
