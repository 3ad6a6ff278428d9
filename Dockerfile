# The fencewatch image: the CLI with the Kafka extras, used by docker-compose.yml
# for the topic creator and the live processor.
FROM python:3.11-slim

# The metrics endpoint binds every interface in the container, so that
# Prometheus in another container can scrape /metrics (the host default is
# 127.0.0.1).
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    FENCEWATCH_METRICS_HOST=0.0.0.0
WORKDIR /src
COPY pyproject.toml README.md hatch_build.py ./
COPY schemas ./schemas
# Shipped in the wheel too (pyproject's force-include): the specification
# `fencewatch spec` prints and the broker script `fencewatch local` runs.
COPY docs/spec.md ./docs/spec.md
COPY scripts/kafka-local scripts/kafka-version scripts/kafka-jars ./scripts/
# The wheel ships examples/ and deploy/ (`fencewatch demo files`), so both are build inputs.
COPY examples ./examples
COPY deploy ./deploy
COPY streams ./streams
COPY fencewatch ./fencewatch
RUN pip install ".[kafka,rocksdb]" \
 && useradd --system --uid 10001 --home-dir /var/lib/fencewatch --create-home fencewatch
USER fencewatch
WORKDIR /var/lib/fencewatch
CMD ["fencewatch", "--help"]
