# Airflow 3.3 with the dlc-airflow provider: the image of docker/compose.yaml, and of Airflow's
# own components when they run in a cluster (README, "Airflow in the cluster").
#
# The local cluster builds it with buildah on its Debian 12 base made from Debian's packages
# (scripts/k8s-images airflow). Elsewhere, any Debian-based image with python3 and its venv
# module works:
#
#   docker build -f docker/airflow.Dockerfile --build-arg BASE_IMAGE=python:3.11-slim -t dlc-airflow/airflow:dev .
#
# Airflow and everything it needs are pinned by constraints/constraints-py3.11.txt, the set
# the tests passed with. DLC_EXTRAS=airflow,demo also installs torch (local-backend DDP demos;
# large).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# The CA bundle pip trusts while building (a path mounted into the build, e.g. behind a TLS
# proxy); unset, pip uses its own. Not kept in the image.
ARG PIP_CERT
ARG AIRFLOW_VERSION=3.3.2
ARG DLC_EXTRAS=airflow
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    AIRFLOW_HOME=/opt/airflow

# A virtual environment (Debian's python3 refuses system-wide pip installs), and the airflow
# user of Airflow's own images: uid 50000, group 0, so any uid a platform picks (with gid 0)
# may write AIRFLOW_HOME.
RUN python3 -m venv /opt/venv \
    && useradd --uid 50000 --gid 0 --home-dir /home/airflow --create-home --shell /bin/bash airflow \
    && mkdir -p /opt/airflow/dags /opt/airflow/logs /opt/airflow/dlc-local-jobs /opt/airflow/auth \
    && chown -R 50000:0 /opt/airflow \
    && chmod -R g+w /opt/airflow

# Airflow and its dependencies first, in their own layer: they change only with the
# constraints. On PostgreSQL, Airflow's components open both a sync (psycopg2) and an async
# (asyncpg) engine. The pip cache is a build cache mount, never part of a layer.
COPY constraints/constraints-py3.11.txt /opt/dlc-airflow/constraints.txt
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install -c /opt/dlc-airflow/constraints.txt "apache-airflow==${AIRFLOW_VERSION}" \
       apache-airflow-providers-cncf-kubernetes kubernetes cryptography psycopg2-binary asyncpg

# The provider itself, last: a code change rebuilds this one small layer. Naming
# apache-airflow with its version keeps pip from moving Airflow while resolving the extras.
COPY pyproject.toml README.md /opt/dlc-airflow/
COPY dlc_airflow /opt/dlc-airflow/dlc_airflow
COPY operators /opt/dlc-airflow/operators
COPY sensors /opt/dlc-airflow/sensors
RUN pip install --no-cache-dir -c /opt/dlc-airflow/constraints.txt \
       "apache-airflow==${AIRFLOW_VERSION}" "/opt/dlc-airflow[${DLC_EXTRAS}]"

COPY docker/airflow-entrypoint.sh /usr/local/bin/airflow-entrypoint

# Root of local-backend job folders (compose mounts a volume here, which takes this folder's
# owner and mode).
ENV DLC_LOCAL_ROOT=/opt/airflow/dlc-local-jobs
USER 50000:0
WORKDIR /opt/airflow
ENTRYPOINT ["/usr/local/bin/airflow-entrypoint"]
CMD ["version"]
