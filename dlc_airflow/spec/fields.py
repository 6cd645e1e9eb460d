"""Field-level checks of the job spec: Kubernetes quantities, label keys and values, DNS
names, tolerations, durations, image references, git sources, and whole numbers and
booleans that must be exactly that — what the API server (or git, or the container
runtime) would refuse, caught at parse time with a message naming our field. Strings Airflow
will render (Jinja) are checked later.
"""

from __future__ import annotations

import math
import re
import types
import typing
from datetime import timedelta
from decimal import Decimal
from urllib.parse import urlsplit

from dlc_airflow.jsonvalue import JSONObject


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


def templated_anywhere(value: object) -> bool:
    """Whether a value (a spec as a dict, a list...) holds a Jinja template anywhere."""
    if isinstance(value, dict):
        return any(templated_anywhere(k) or templated_anywhere(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(templated_anywhere(v) for v in value)
    return is_templated(value)


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


_UNITS: dict[str, Decimal] = {
    "": Decimal(1), "m": Decimal("0.001"), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    **{unit: Decimal(2) ** (10 * (i + 1)) for i, unit in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))}}


def quantity_value(text: str) -> float:
    """The number a Kubernetes quantity stands for ('500m' 0.5, '16Gi' 17179869184, '1e3' 1000);
    ValueError for what is not one."""
    match = QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError(f"{text!r} is not a Kubernetes quantity; write e.g. 4, 500m, 16Gi")
    digits, suffix = match.group(1), match.group(3) or ""
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return float(Decimal(digits) * Decimal(10) ** int(suffix[1:]))
    return float(Decimal(digits) * _UNITS[suffix])


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
    if len(value) > 63:
        raise ValueError(f"label {key}: the value is {len(value)} characters ({value[:16]!r}...): Kubernetes allows "
                         "at most 63; shorten it (or make it an annotation)")
    if not _LABEL_VALUE.match(value):
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


def check_toleration(tol: JSONObject, where: str) -> None:
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


def parse_duration(value: object, what: str) -> timedelta | None:
    """Seconds (int), a timedelta, or a string such as '90s', '30m', '2h', '1d12h'."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"{what} must be seconds, a timedelta or a string like '2h', not {value!r}")
    try:
        if isinstance(value, (int, float)):
            if not math.isfinite(value):
                raise ValueError(f"{what} {value!r} is not a duration; write seconds or e.g. '90s', '30m', '2h'")
            return timedelta(seconds=value)
        if isinstance(value, str):
            match = _DURATION.match(value.strip())
            if value.strip() and match and any(match.groups()):
                d, h, m, s = (int(g or 0) for g in match.groups())
                return timedelta(days=d, hours=h, minutes=m, seconds=s)
            if value.strip().isdigit():
                return timedelta(seconds=int(value))
    except OverflowError:  # timedelta's own message ("days=...; must have magnitude <= ...") names no field
        raise ValueError(f"{what} {value!r} is too long; write at most a few years, e.g. '30d'") from None
    raise ValueError(f"{what} {value!r} is not a duration; write seconds or e.g. '90s', '30m', '2h'")


def positive_seconds(value: object, what: str) -> float | None:
    """A duration option (queue_timeout, timeout) in seconds; None stays None. Zero and
    negative values are refused: they would fail the job the moment it is submitted."""
    duration = parse_duration(value, what)
    if duration is None:
        return None
    seconds = duration.total_seconds()
    if seconds <= 0:
        given = f"{seconds:g} seconds" if isinstance(value, timedelta) else repr(value)
        raise ValueError(f"{what} must be positive, not {given}; leave it unset for no limit")
    return seconds


# -- whole numbers and booleans -------------------------------------------------------------
# pydantic's lax mode reads True as 1, 2.0 as 2, "no" and 1 as booleans; a spec field that is
# a count or a switch takes exactly that, so `worker: true` or `read_only: "no"` is refused.

def scalar_kind(annotation: object) -> str | None:
    """'int', 'bool' or 'ints' (a list of int) for a field annotated so (optional or not)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0] if len(args) == 1 else None
    if annotation is bool:
        return "bool"
    if annotation is int:
        return "int"
    if typing.get_origin(annotation) is list and typing.get_args(annotation) == (int,):
        return "ints"
    return None


def check_whole_number(value: object, what: str) -> object:
    """A whole number as given (digits in a string and 2.0 are read as such); bools,
    fractions and other text are refused. Other types are left to the model's own check."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a whole number, not {str(value).lower()} (true/false is not a number)")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{what} must be a whole number, not {value:g}")
        return int(value)
    if isinstance(value, str) and not is_templated(value):
        text = value.strip()
        if not re.fullmatch(r"[+-]?\d+", text):
            raise ValueError(f"{what} must be a whole number, not {value!r}")
        return int(text)
    return value


def check_boolean(value: object, what: str) -> object:
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false, not {value!r}")
    return value


def check_scalar(value: object, kind: str | None, what: str) -> object:
    if kind == "int":
        return check_whole_number(value, what)
    if kind == "bool":
        return check_boolean(value, what)
    if kind == "ints" and isinstance(value, list):
        return [check_whole_number(v, f"{what}[{i}]") for i, v in enumerate(value)]
    return value


# -- image references (the grammar of github.com/distribution/reference) ----------------------
# name [":" tag] ["@" digest]; name = [domain "/"] path; the domain may have uppercase
# letters, the repository path may not.
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_IMAGE_DOMAIN = re.compile(rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?")
_IMAGE_TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
_IMAGE_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")
_IMAGE_EXAMPLE = "write e.g. registry.example.com/team/train:1.0 or team/train@sha256:<64 hex digits>"


def check_image(value: str, what: str = "image") -> str:
    """An OCI image reference, as the container runtime parses it; templated ones later."""
    if is_templated(value):
        return value
    if not value or not value.strip():
        raise ValueError(f"{what} is empty: give the container image, e.g. registry.example.com/team/train:1.0")
    if any(ch.isspace() for ch in value):
        raise ValueError(f"{what} {value!r} contains whitespace; write one image reference such as registry/name:tag")

    def bad(why: str) -> ValueError:
        return ValueError(f"{what} {value!r} is not an image reference: {why}; {_IMAGE_EXAMPLE}")

    if value.count("@") > 1:
        raise bad("it has more than one '@' (one digest at most)")
    name, _, digest = value.partition("@")
    if "@" in value and not _IMAGE_DIGEST.fullmatch(digest):
        raise bad(f"digest {digest!r} must be algorithm:hex, such as sha256:<64 hex digits>")
    last = name.rsplit("/", 1)[-1]
    if last.count(":") > 1:
        raise bad("it has more than one ':' after the repository (one tag at most)")
    if ":" in last:
        name, _, tag = name.rpartition(":")
        if not _IMAGE_TAG.fullmatch(tag):
            raise bad(f"tag {tag!r} must be 1-128 of letters, digits, '_', '.' and '-', not starting with '.' or '-'")
    if not name:
        raise bad("the repository name is missing")
    if len(name) > 255:
        raise bad(f"the name is {len(name)} characters, at most 255")
    first, slash, rest = name.partition("/")
    # as docker and containerd read it: the first component is a registry if it looks like one
    if slash and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        if not _IMAGE_DOMAIN.fullmatch(first):
            raise bad(f"registry {first!r} must be a host name with an optional :port (no scheme)")
        path = rest
    else:
        path = name
    for component in path.split("/"):
        if not _PATH_COMPONENT.fullmatch(component):
            if component != component.lower():
                raise bad(f"the repository path {path!r} must be lowercase")
            raise bad(f"repository path component {component!r} must be lowercase letters and digits, "
                      "separated by '.', '_', '__' or '-'")
    return value


# -- git sources --------------------------------------------------------------------------
GIT_SCHEMES = ("https", "http", "ssh", "git", "file")
_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SCP_LIKE = re.compile(r"^(?:[A-Za-z0-9._~+-]+@)?([A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):(.+)$")
# characters a shell or git's ref syntax gives a meaning to: never in a branch, tag or commit
_REV_FORBIDDEN = set(";&|$`<>()'\"\\!*?[]{}~^:#")
_REPO_EXAMPLE = ("give a URL (https://, http://, ssh://, git://, file://), an scp-like user@host:path, "
                 "or an absolute path")


def check_git_repo(value: str, what: str = "code.repo") -> str:
    if is_templated(value):
        return value
    if value.startswith("-"):
        raise ValueError(f"{what} {value!r} starts with '-' (git would read it as an option): {_REPO_EXAMPLE}")
    if not value or any(ch.isspace() or not ch.isprintable() for ch in value):
        raise ValueError(f"{what} {value!r} is not a git repository: {_REPO_EXAMPLE}")
    scheme = _URL_SCHEME.match(value)
    if scheme:
        name = scheme.group(1).lower()
        if name not in GIT_SCHEMES:
            raise ValueError(f"{what} {value!r}: scheme {name}:// is not one the clone step uses; "
                             "use https://, http://, ssh://, git:// or file://")
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            raise ValueError(f"{what} {value!r} is not a valid URL (check the host and port)") from None
        if parts.password:  # the value is not echoed: it holds a secret
            shown = value.replace(f":{parts.password}@", ":***@", 1)
            raise ValueError(f"{what} {shown!r} carries a password or token, which would sit in the job's "
                             "objects and logs: put the credentials in a Secret (keys username, password) and "
                             "name it in code.secret_name")
        if name != "file" and (not parts.hostname or not parts.path.strip("/")):
            raise ValueError(f"{what} {value!r} needs a host and a repository path, e.g. "
                             "https://git.example.com/team/repo.git")
        if name == "file" and not parts.path.startswith("/"):
            raise ValueError(f"{what} {value!r}: a file:// URL needs an absolute path (file:///srv/repo.git)")
        return value
    if value.startswith("/"):  # a local repository (the local backend, or a mounted one)
        return value
    scp = _SCP_LIKE.match(value)
    if scp is None or "/" in value.split(":", 1)[0]:
        raise ValueError(f"{what} {value!r} is not a git repository: {_REPO_EXAMPLE}")
    if scp.group(2).startswith(":"):
        raise ValueError(f"{what} {value!r}: remote helpers (<transport>::<address>) are not allowed; "
                         f"{_REPO_EXAMPLE}")
    return value


def check_git_revision(value: str, what: str = "code.revision") -> str:
    """A branch, tag or commit: what `git check-ref-format` allows, minus shell metacharacters."""
    if is_templated(value):
        return value
    if not value:
        raise ValueError(f"{what} is empty: give a branch, tag or commit")
    bad = "".join(sorted(set(value) & _REV_FORBIDDEN))
    if bad:
        raise ValueError(f"{what} {value!r} contains {bad!r}; a branch, tag or commit has none of "
                         f"{''.join(sorted(_REV_FORBIDDEN))}")
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise ValueError(f"{what} {value!r} contains whitespace; give one branch, tag or commit")
    if value.startswith("-"):
        raise ValueError(f"{what} {value!r} starts with '-' (git would read it as an option); "
                         "give a branch, tag or commit")
    if (".." in value or "//" in value or value.startswith("/") or value.endswith(("/", ".", ".lock"))
            or value == "@" or any(part.startswith(".") for part in value.split("/"))):
        raise ValueError(f"{what} {value!r} is not a valid git ref (no '..', '//', leading or trailing '/', "
                         "component starting with '.', trailing '.' or '.lock'); give a branch, tag or commit")
    return value


def check_dns_label(value: str | None, what: str) -> str | None:
    """A Kubernetes object name of one DNS-1123 label (namespaces, job names)."""
    if value is None or is_templated(value):
        return value
    if not isinstance(value, str) or len(value) > 63 or not _DNS_1123_LABEL.match(value):
        raise ValueError(f"{what} {value!r} must be a DNS label: at most 63 of a-z, 0-9 and '-', "
                         "starting and ending with a letter or digit")
    return value


_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
