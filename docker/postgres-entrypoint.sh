#!/bin/sh
# docker/postgres.Dockerfile's entrypoint: on an empty data folder, make the cluster the
# official postgres image would (superuser POSTGRES_USER with POSTGRES_PASSWORD, database
# POSTGRES_DB, password logins from other hosts), then run the command.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  [ -n "${POSTGRES_PASSWORD:-}" ] || { echo "postgres-entrypoint: set POSTGRES_PASSWORD" >&2; exit 1; }
  # the password goes through a private file, never an argument
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 -D "$PGDATA" > /dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\";" |
      postgres --single -D "$PGDATA" postgres > /dev/null
  fi
  echo "postgres-entrypoint: made the cluster (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
exec "$@"
