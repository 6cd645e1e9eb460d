"""Names shared across processes and Airflow components: what one process writes and another
reads (the worker, the triggerer, the sensor, the UI, the jobs CLI). Defined once here."""

#: XCom key of a job's whereabouts (a JobRef's fields, plus conn_id, local_root, try_number),
#: pushed as soon as the job exists; sensors, the UI pages and other tasks read it
XCOM_REF = "dlc_job"
#: task state store key (durable execution, Airflow 3.3+): the job, and its result once known
STATE_KEY = "dlc_job"
#: the connection a task without conn_id uses (the cncf.kubernetes provider's default)
DEFAULT_CONN_ID = "kubernetes_default"
