"""What a deployment's admin sets for dlc-airflow in Airflow's config, section [dlc_airflow]
(airflow.cfg, or AIRFLOW__DLC_AIRFLOW__<KEY> in the environment):

- `policy`: what any DAG may ask for (dlc_airflow.airflow.policy_source);
- `default_deferrable`: how a task that sets no `deferrable` waits (default true: in the
  triggerer, holding no worker slot);
- `big_dag_budget`: how big a DAG whose tasks start in the triggerer may be before they start
  on workers instead (dlc_airflow.airflow.big_dags).
"""

from __future__ import annotations

SECTION = "dlc_airflow"
TRUE, FALSE = {"true", "t", "1", "yes", "y", "on"}, {"false", "f", "0", "no", "n", "off"}


class SettingError(ValueError):
    """A [dlc_airflow] setting Airflow's config gives is not one we can read."""


def default_deferrable() -> bool:
    """Whether DLCJobOperator and DLCJobSensor wait in the triggerer when a DAG does not say.

    True unless the admin sets it false (a deployment that runs no triggerer). Airflow's
    [operators] default_deferrable (false) is not read: a DLC job waits for hours, and a
    task waiting on a worker holds one of `[core] parallelism`'s slots all that time."""
    from airflow.configuration import conf

    raw = conf.get(SECTION, "default_deferrable", fallback=None)
    if raw is None or not str(raw).strip():
        return True
    value = str(raw).strip().lower()
    if value in TRUE | FALSE:
        return value in TRUE
    raise SettingError(f"[{SECTION}] default_deferrable in Airflow's config must be true or false, not {raw!r}")


def big_dag_budget(default: int) -> int:
    """(tasks starting in the triggerer) x (tasks in the DAG) a DAG may reach before its tasks
    start on workers: `default` (dlc_airflow.airflow.big_dags.BUDGET) unless the admin sets it
    (an Airflow that sends the DAG to its triggerer once can take more)."""
    from airflow.configuration import conf

    raw = conf.get(SECTION, "big_dag_budget", fallback=None)
    if raw is None or not str(raw).strip():
        return default
    try:
        value = int(str(raw).strip().replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise SettingError(f"[{SECTION}] big_dag_budget in Airflow's config must be a whole number of at least 1 "
                           f"(tasks starting in the triggerer x tasks in the DAG), not {raw!r}")
    return value
