"""Field-level checks of the job spec: Kubernetes quantities, label keys and values, DNS
names, tolerations and durations — what the API server would refuse, caught at parse time
with a message naming our field. Strings Airflow will render (Jinja) are checked later.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

def is_templated(value: object) -> bool:
    """True for a string Airflow will render (contains Jinja markers)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


# Kubernetes quantity: 4, 500m, 1.5, 16Gi, 1e3
QUANTITY = re.compile(r"^[+]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?\d+)?$")
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")

# Longest role name: the native backend names pods <job>-<role>-<index> within 63 chars.
MAX_ROLE_NAME = 10
# An Indexed Job runs at most 100000 completions (and pod names keep a 5-digit index).
MAX_REPLICAS = 100_000
# ttlSecondsAfterFinished is an int32 in every API that has it.
MAX_TTL_SECONDS = 2**31 - 1
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


def check_quantity(value: str | int | float | None, what: str) -> str | None:
    if value is None:
        return None
    text = str(value)
    if is_templated(text):
        return text
    if not QUANTITY.match(text):
        raise ValueError(
            f"{what} {text!r} is not a Kubernetes quantity; write e.g. 4, 500m, 16Gi"
        )
    return text


def check_label_key(key: str, what: str = "label key") -> None:
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _LABEL_PREFIX.match(prefix)):
        raise ValueError(f"{what} {key!r}: prefix must be a DNS subdomain")
    if len(name) > 63 or not _LABEL_NAME.match(name):
        raise ValueError(
            f"{what} {key!r}: name must be <= 63 characters of [A-Za-z0-9-_.], "
            "starting and ending alphanumeric"
        )


def check_label_value(key: str, value: str) -> None:
    if is_templated(value):
        return
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ValueError(
            f"label {key}={value!r}: value must be <= 63 characters of [A-Za-z0-9-_.], "
            "starting and ending alphanumeric"
        )


def check_label_like(value: str, what: str) -> str:
    """A value that ends up as a label value (node selectors, node affinity)."""
    if not is_templated(value) and (not value or len(value) > 63 or not _LABEL_VALUE.match(value)):
        raise ValueError(
            f"{what} {value!r} must be 1-63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric"
        )
    return value


def check_dns_subdomain(value: str, what: str) -> str:
    if not is_templated(value) and (len(value) > 253 or not _DNS_SUBDOMAIN.match(value)):
        raise ValueError(f"{what} {value!r} must be a lowercase DNS subdomain (a-z, 0-9, '-', '.')")
    return value


def has_backstep(path: str) -> bool:
    return ".." in path.split("/")


def check_toleration(tol: dict[str, Any], where: str) -> None:
    """What the API server checks in a toleration, named by our field."""
    unknown = sorted(set(tol) - _TOLERATION_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; a toleration has {sorted(_TOLERATION_KEYS)}")
    operator = tol.get("operator", "Equal")
    if operator not in ("Equal", "Exists"):
        raise ValueError(f"{where}.operator {operator!r} must be 'Equal' or 'Exists'")
    key, value = tol.get("key", ""), tol.get("value", "")
    if key:
        check_label_key(str(key))
    elif operator != "Exists":
        raise ValueError(f"{where}: a toleration without a key needs operator 'Exists'")
    if operator == "Exists" and value:
        raise ValueError(f"{where}.value must be empty when operator is 'Exists'")
    if value:
        check_label_value(str(key), str(value))
    effect = tol.get("effect", "")
    if effect not in _TOLERATION_EFFECTS:
        raise ValueError(f"{where}.effect {effect!r} must be one of {list(_TOLERATION_EFFECTS[1:])} (or empty)")
    if "tolerationSeconds" in tol and effect != "NoExecute":
        raise ValueError(f"{where}.tolerationSeconds needs effect 'NoExecute'")


def parse_duration(value: Any, what: str) -> timedelta | None:
    """Seconds (int), a timedelta, or a string such as '90s', '30m', '2h', '1d12h'."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"{what} must be seconds, a timedelta or a string like '2h'")
    if isinstance(value, (int, float)):
        return timedelta(seconds=value)
    if isinstance(value, str):
        match = _DURATION.match(value.strip())
        if value.strip() and match and any(match.groups()):
            d, h, m, s = (int(g or 0) for g in match.groups())
            return timedelta(days=d, hours=h, minutes=m, seconds=s)
        if value.strip().isdigit():
            return timedelta(seconds=int(value))
    raise ValueError(f"{what} {value!r} is not a duration; write seconds or e.g. '90s', '30m', '2h'")
