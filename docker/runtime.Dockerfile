# Images for dlc-airflow job containers, two targets of one build (their common layers built once):
#
#   runtime     (the default) Python 3.11, PyTorch (CPU use), scikit-learn, the dlc-airflow
#               runtime helpers (rank/shard env, atomic checkpoints, metrics, `dlc-airflow
#               sanity-check`)
#   frameworks  the runtime plus the other frameworks dlc-airflow wires: TensorFlow (CPU),
#               XGBoost, DeepSpeed, Ray (with wget for KubeRay's probes), Megatron Core, and
#               Open MPI with mpi4py and an SSH server (an MPI launcher starts its ranks over SSH)
#
# The local cluster builds both with buildah on a Debian 12 base made from Debian's packages
# (scripts/k8s-images). Elsewhere, any Debian-based image with python3 and its venv module works:
#
#   docker build -f docker/runtime.Dockerfile --build-arg BASE_IMAGE=python:3.11-slim -t dlc-airflow/runtime:dev .
#   docker build -f docker/runtime.Dockerfile --target frameworks ... -t dlc-airflow/frameworks:dev .
#
# torch comes from PyPI by default (its Linux wheels carry the CUDA libraries: a large layer,
# and the only index this project's machines reach). Where download.pytorch.org is reachable,
# --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu gives a much smaller image.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE} AS python-torch

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


FROM python-torch AS frameworks-deps

ARG PIP_CERT
ARG TENSORFLOW_VERSION=2.21.0
ARG XGBOOST_VERSION=3.2.0
ARG RAY_VERSION=2.60.0
ARG MPI4PY_VERSION=4.1.2
ARG DEEPSPEED_VERSION=0.19.8

# Open MPI and OpenSSH from Debian's packages (mpi4py builds against them); a C++ toolchain
# and ninja for DeepSpeed's CPU communication op, built below.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openmpi-bin=4.1.* libopenmpi-dev=4.1.* \
       openssh-server=1:9.* openssh-client=1:9.* gcc=4:12.* g++=4:12.* libc6-dev=2.36-* \
       ninja-build=1.11.* python3-dev=3.11.* \
    && rm -rf /var/lib/apt/lists/*

RUN --mount=type=cache,target=/root/.cache/pip \
    pip install "tensorflow-cpu==${TENSORFLOW_VERSION}" "xgboost==${XGBOOST_VERSION}" \
       "ray[default]==${RAY_VERSION}" "mpi4py==${MPI4PY_VERSION}"

# DeepSpeed is a source distribution that imports torch to build: no build isolation, so it
# builds against the torch above instead of downloading another one. Its CPU accelerator
# needs the shared-memory communication op at init: built now (a job would otherwise compile
# it on every rank at start).
# (No pip cache: a wheel cached from a build without the op would be reused.)
ENV DS_ACCELERATOR=cpu
RUN DS_BUILD_SHM_COMM=1 pip install --no-cache-dir --no-build-isolation "deepspeed==${DEEPSPEED_VERSION}" \
    && python3 -c 'import deepspeed.git_version_info as v; assert v.installed_ops["deepspeed_shm_comm"], v.installed_ops'

# wget: KubeRay's readiness and liveness probes of Ray heads and workers run
# `wget ... http://localhost:<port>/api/..._healthz | grep success` in the container.
RUN apt-get update \
    && apt-get install -y --no-install-recommends wget=1.21.* \
    && rm -rf /var/lib/apt/lists/*

# Megatron Core (its tensor- and pipeline-parallel layers; torch, numpy and packaging are all
# it needs). Without Transformer Engine and Apex it falls back to its own kernels: on CPU its
# tensor-parallel layers run over gloo.
ARG MEGATRON_CORE_VERSION=0.16.1
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install "megatron-core==${MEGATRON_CORE_VERSION}"


# The package itself, last: a code change rebuilds this one small layer of each target.
FROM frameworks-deps AS frameworks

ARG PIP_CERT
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

# An SSH server the image's user runs itself (an MPI worker's command:
# `/usr/sbin/sshd -De -f /etc/ssh/dlc/sshd_config`): its own host key, an unprivileged port,
# which the clients of this image use too. The keys users log in with are the job's
# (dlc-airflow puts them in ~/.ssh).
RUN mkdir -p /etc/ssh/dlc \
    && ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/dlc/ssh_host_ed25519_key \
    && printf '%s\n' 'Port 2222' 'HostKey /etc/ssh/dlc/ssh_host_ed25519_key' 'PidFile /tmp/sshd.pid' \
       'UsePAM no' 'PasswordAuthentication no' 'KbdInteractiveAuthentication no' > /etc/ssh/dlc/sshd_config \
    && chown -R dlc:dlc /etc/ssh/dlc \
    && printf '%s\n' 'Host *' '    Port 2222' > /etc/ssh/ssh_config.d/dlc.conf

USER 1000:1000
WORKDIR /workspace
CMD ["python3"]


FROM python-torch AS runtime

ARG PIP_CERT
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
