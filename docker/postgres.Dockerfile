# PostgreSQL from Debian's packages, a drop-in for docker/compose.yaml's `postgres:17` where
# no remote registry is reachable (the tests start the compose stack with it). It takes the
# same variables (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB) and the same data folder.
#
# The local cluster builds it with buildah on its Debian 12 base (scripts/k8s-images postgres).
# Elsewhere:
#
#   docker build -f docker/postgres.Dockerfile --build-arg BASE_IMAGE=debian:bookworm-slim -t dlc-airflow/postgres:dev .
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

# The postgres user of the official image (uid and gid 999), made before the package would
# make one with whatever uid is free. Debian's package makes a cluster of its own on install;
# the entrypoint makes the one used.
# Not pinned further than postgresql-15: Debian 12's point releases replace the exact version.
# hadolint ignore=DL3008
RUN groupadd --system --gid 999 postgres \
    && useradd --system --uid 999 --gid postgres --home-dir /var/lib/postgresql --shell /bin/bash postgres \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
    && pg_dropcluster 15 main \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /run/postgresql \
    && chmod 700 /var/lib/postgresql/data

COPY docker/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint

ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data
USER 999:999
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
CMD ["postgres", "-c", "listen_addresses=*"]
