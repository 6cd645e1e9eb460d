# Runtime image for dlc-airflow job containers: Python 3.11, CPU PyTorch, the dlc-airflow
# runtime helpers (rank/shard env, atomic checkpoints, metrics, `dlc-airflow sanity-check`).
#
#   docker build -f docker/runtime.Dockerfile -t dlc-airflow/runtime:dev .     (from the repo root)
#
# GPU jobs need a CUDA build of torch instead: --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
FROM python:3.11-slim

ARG TORCH_VERSION=2.15.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# torch first, in its own layer: it is large and changes far less often than our code.
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

# numpy and scikit-learn: the reference pipeline's jobs (dags/retraining/jobs) read the digits
# data set scikit-learn ships, so the image runs them with no download.
ARG SKLEARN_VERSION=1.9.1
RUN pip install --no-cache-dir "scikit-learn==${SKLEARN_VERSION}"

# Only what the package build needs (docker/runtime.Dockerfile.dockerignore keeps the context small).
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dlc_airflow ./dlc_airflow
COPY operators ./operators
COPY sensors ./sensors
RUN pip install --no-cache-dir /src \
    && rm -rf /src \
    && useradd --create-home --uid 1000 --user-group --shell /bin/bash dlc \
    && mkdir -p /workspace \
    && chown dlc:dlc /workspace

# Jobs run unprivileged as uid 1000, given as a number so Kubernetes runAsNonRoot can check
# it without reading /etc/passwd; /workspace is where the code source and scratch files go.
USER 1000:1000
WORKDIR /workspace

CMD ["python"]
