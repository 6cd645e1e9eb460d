# Airflow with the dlc-airflow provider installed: the image of docker/compose.yaml.
#
#   docker build -f docker/airflow.Dockerfile -t dlc-airflow/airflow:dev .     (from the repo root)
#
# DLC_EXTRAS=airflow,demo also installs torch (for local-backend DDP demos; large).
ARG AIRFLOW_VERSION=3.3.2
FROM apache/airflow:${AIRFLOW_VERSION}-python3.11

# Re-declared: an ARG before FROM is not visible after it.
ARG AIRFLOW_VERSION=3.3.2
ARG DLC_EXTRAS=airflow

COPY --chown=50000:0 pyproject.toml README.md /opt/dlc-airflow/
COPY --chown=50000:0 dlc_airflow /opt/dlc-airflow/dlc_airflow
COPY --chown=50000:0 operators /opt/dlc-airflow/operators
COPY --chown=50000:0 sensors /opt/dlc-airflow/sensors

# As the airflow user (50000), naming apache-airflow with the image's own version so pip cannot
# up- or downgrade Airflow while resolving the provider's requirements.
USER 50000:0
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" "/opt/dlc-airflow[${DLC_EXTRAS}]" \
    && mkdir -p /opt/airflow/dlc-local-jobs \
    && chmod 775 /opt/airflow/dlc-local-jobs

# Root of local-backend job folders (compose mounts a volume here, which takes this
# folder's owner and mode); group 0 may write, as any AIRFLOW_UID runs with gid 0.
ENV DLC_LOCAL_ROOT=/opt/airflow/dlc-local-jobs
