# Runtime image for dlc-airflow job containers: Python 3.11, PyTorch (CPU use), the dlc-airflow
# runtime helpers (rank/shard env, atomic checkpoints, metrics, `dlc-airflow sanity-check`).
#
# The local cluster builds it with buildah on a Debian 12 base made from Debian's packages
# (scripts/k8s-images runtime). Elsewhere, any base with python3 and its venv module works:
#
#   docker build -f docker/runtime.Dockerfile --build-arg BASE_IMAGE=python:3.11-slim -t dlc-airflow/runtime:dev .
#
# torch comes from PyPI by default (its Linux wheels carry the CUDA libraries: a large layer,
# and the only index this project's machines reach). Where download.pytorch.org is reachable,
# --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu gives a much smaller image.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# The CA bundle pip trusts while building (a path mounted into the build, e.g. behind a TLS
# proxy); unset, pip uses its own. Not kept in the image.
ARG PIP_CERT
ARG TORCH_VERSION=2.15.0
ARG TORCH_INDEX_URL=https://pypi.org/simple
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# A virtual environment: Debian's python3 refuses system-wide pip installs (PEP 668).
RUN python3 -m venv /opt/venv

# torch first, in its own layer: it is large and changes far less often than our code. The
# pip cache is a build cache mount, never part of a layer.
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

# numpy and scikit-learn: the reference pipeline's jobs (dags/retraining/jobs) read the digits
# data set scikit-learn ships, so the image runs them with no download.
ARG SKLEARN_VERSION=1.9.1
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install "scikit-learn==${SKLEARN_VERSION}"

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

CMD ["python3"]
