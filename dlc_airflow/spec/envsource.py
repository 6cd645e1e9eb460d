"""Env values from secrets, as the spec takes them: a string, or one of three references.

    env:
      DB_PASSWORD: {secret: db-creds, key: password}          # a Kubernetes Secret's key
      HF_TOKEN: {airflow_variable: hf_token}                  # an Airflow Variable
      WAREHOUSE_PW: {airflow_connection: warehouse, field: password}
                    # a connection's login, password (default), host, port, schema, uri or extra.<key>

The spec (and so the DAG's serialized fields) only ever holds these references; where their
values are read and where they go is dlc_airflow.secrets.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

from dlc_airflow.spec.fields import check_dns_subdomain, is_templated

CONNECTION_FIELDS = ("login", "password", "host", "port", "schema", "uri")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_SHAPES = "{secret: <name>, key: <key>}, {airflow_variable: <name>} or {airflow_connection: <conn_id>, field: <field>}"


class _Ref(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def describe(self) -> str:
        raise NotImplementedError


class SecretKeyRef(_Ref):
    """`{secret: <name>, key: <key>}`: the key of a Kubernetes Secret in the job's namespace."""

    secret: str
    key: str

    def describe(self) -> str:
        return f"<secret {self.secret}/{self.key}>"


class AirflowVariableRef(_Ref):
    """`{airflow_variable: <name>}`: an Airflow Variable, read when the job is submitted."""

    airflow_variable: str

    def describe(self) -> str:
        return f"<airflow_variable {self.airflow_variable}>"


class AirflowConnectionRef(_Ref):
    """`{airflow_connection: <conn_id>, field: <field>}`: a field of an Airflow connection."""

    airflow_connection: str
    field: str = "password"

    def describe(self) -> str:
        return f"<airflow_connection {self.airflow_connection} {self.field}>"


AirflowRef = AirflowVariableRef | AirflowConnectionRef
Source = SecretKeyRef | AirflowVariableRef | AirflowConnectionRef
SOURCE_TYPES = (SecretKeyRef, AirflowVariableRef, AirflowConnectionRef)
_SOURCE_KEYS: dict[str, type[_Ref]] = {"secret": SecretKeyRef, "airflow_variable": AirflowVariableRef,
                                        "airflow_connection": AirflowConnectionRef}


def env_value(value: Any) -> Any:
    """One env value as the spec takes it: a string, or a source mapping made a reference.
    The messages are one line; pydantic puts the env var's location in front."""
    if isinstance(value, (str, _Ref)):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"must be a string (quote numbers and booleans in YAML) or a source: {_SHAPES}; "
                         f"got {type(value).__name__}")
    keys = sorted(map(str, value))
    if "valueFrom" in value or "value_from" in value:
        raise ValueError("write a Kubernetes Secret's key as {secret: <name>, key: <key>}, not valueFrom")
    sources = [k for k in keys if k in _SOURCE_KEYS]
    if not sources:
        raise ValueError(f"{keys} is not a source: write {_SHAPES}")
    if len(sources) > 1:
        raise ValueError(f"give one source, not {' and '.join(sources)}")
    model = _SOURCE_KEYS[sources[0]]
    unknown = sorted(set(keys) - set(model.model_fields))
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r} of a {sources[0]} source: it takes "
                         f"{', '.join(model.model_fields)}")
    for field, given in value.items():
        if not isinstance(given, str) or not given.strip():
            raise ValueError(f"{sources[0]} source: {field} must be a non-empty string, not {given!r}")
    if model is SecretKeyRef:
        if "key" not in value:
            raise ValueError(f"{{secret: {value['secret']}}} needs key: which key of the Secret holds the value")
        check_dns_subdomain(value["secret"], "secret")
        if not is_templated(value["key"]) and (len(value["key"]) > 253 or not _SECRET_KEY.match(value["key"])):
            raise ValueError(f"key {value['key']!r} is not a Secret key (letters, digits, '-', '_', '.')")
    if model is AirflowConnectionRef:
        field = value.get("field", "password")
        if not is_templated(field) and field not in CONNECTION_FIELDS and not (
                field.startswith("extra.") and len(field) > len("extra.")):
            raise ValueError(f"field {field!r} of connection {value['airflow_connection']!r}: use one of "
                             f"{', '.join(CONNECTION_FIELDS)} or extra.<key>")
    return model.model_validate(value)


EnvValue = Annotated[str | SecretKeyRef | AirflowVariableRef | AirflowConnectionRef, BeforeValidator(env_value)]


def describe(value: Any) -> str:
    return value.describe() if isinstance(value, _Ref) else "<literal>"
