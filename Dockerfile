# The fencewatch image: the CLI with the Kafka extras, used by docker-compose.yml
# for the topic creator and the live processor.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY streams ./streams
RUN pip install ".[kafka,rocksdb]" \
 && useradd --system --uid 10001 --home-dir /var/lib/fencewatch --create-home fencewatch
USER fencewatch
WORKDIR /var/lib/fencewatch
CMD ["fencewatch", "--help"]
