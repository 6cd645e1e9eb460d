#!/bin/sh
# The Airflow image's entrypoint: `airflow <arguments>`, after what the environment asks for
# first (the variables of Airflow's own images, which docker/compose.yaml's airflow-init uses):
#   _AIRFLOW_DB_MIGRATE=true        migrate the metadata database, once it answers (`airflow db
#                                   check` up to CONNECTION_CHECK_MAX_COUNT times, default 20,
#                                   CONNECTION_CHECK_SLEEP_TIME seconds apart, default 3: a
#                                   compose tool that starts services without waiting for their
#                                   health, as podman-compose 1.0 does, starts it beside the database)
#   _AIRFLOW_WWW_USER_CREATE=true   give _AIRFLOW_WWW_USER_USERNAME the password
#                                   _AIRFLOW_WWW_USER_PASSWORD in the simple auth manager's
#                                   passwords file (the user itself is listed in
#                                   AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS)
set -eu
if [ "${_AIRFLOW_DB_MIGRATE:-}" = true ]; then
  tries=0
  until airflow db check > /dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge "${CONNECTION_CHECK_MAX_COUNT:-20}" ]; then
      echo "airflow-entrypoint: the metadata database did not answer after $tries tries; check [database] sql_alchemy_conn and that the database runs" >&2
      exit 1
    fi
    echo "airflow-entrypoint: waiting for the metadata database ($tries)"
    sleep "${CONNECTION_CHECK_SLEEP_TIME:-3}"
  done
  airflow db migrate
fi
if [ "${_AIRFLOW_WWW_USER_CREATE:-}" = true ]; then
  # from the environment, never an argument: a process list must not show the password
  python3 - <<'PY'
import json, os
path = os.environ.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE") or os.path.join(
    os.environ["AIRFLOW_HOME"], "simple_auth_manager_passwords.json.generated")
user, password = os.environ["_AIRFLOW_WWW_USER_USERNAME"], os.environ["_AIRFLOW_WWW_USER_PASSWORD"]
try:
    with open(path) as f:
        passwords = json.load(f)
except (FileNotFoundError, ValueError):
    passwords = {}
passwords[user] = password
with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
    os.fchmod(f.fileno(), 0o600)  # (a file that was there keeps its mode otherwise)
    json.dump(passwords, f)
print(f"airflow-entrypoint: the password of {user} is set in {path}")
PY
fi
exec airflow "$@"
