"""Env values from secrets: where they are read, where they go, and masking.

A job's env value is a string or a reference (dlc_airflow.spec.envsource): a Kubernetes
Secret's key, an Airflow Variable, or a field of an Airflow connection. The spec (and so
the DAG's serialized fields, the operator's `job`) only ever holds references.

    resolve.py  the job's env entries, which of them are hidden (Airflow sources, and literal
                values under secret-looking names: Airflow's own rules, `is_sensitive`), and
                reading a value now (`resolve`, `hidden_values`)
    mask.py     registering values with Airflow's secrets masker, in the task process before
                any job log is copied (`register_job`) and again in the triggerer from the
                references (`TriggerSecrets`); the redactor of replica logs

Where the values go is each backend's own business:
- Kubernetes (k8s/backends/jobsecret.py): a Secret source is a `valueFrom.secretKeyRef`;
  hidden values are resolved at submit into the job's own Secret (`<job>-env`, owned by the
  job's primary object) and referenced the same way; `render` shows placeholders.
- local (local/secrets.py): resolved at submit (a Secret source reads its local stand-in
  <root>/volumes/secret-<name>/<key>) and handed to the detached supervisor on its stdin;
  spec.json keeps the references and `HIDDEN` for secret literals.
- Slurm: in a 0600 file in the job's folder, never in its environment (slurm/backend.py `SECRETS_FILE`).
- Kubernetes Secret values are masked only where the identity may `get` that Secret, through
  the runner's optional `SecretReader` capability (dlc_airflow.runner).

Airflow is imported lazily: DAG files import the spec, and parse time matters.
"""
