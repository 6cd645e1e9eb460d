"""The errors every layer shares, whatever the backend.

- SpecError: a job spec that cannot be used (one line naming the field);
- SecretSourceError: a secret env value that cannot be had (no such variable, connection...);
- BackendError: a job a backend cannot run, or an unknown backend (parse time, `validate`);
  UnsupportedType is the one another backend may run: the registry completes its message
  with those backends (`registry.check`), which no backend knows of.
- SubmitError / OwnershipError: what a runner's `submit` raises (dlc_airflow.runner).

Pure: no imports of the library, so every module may raise them.
"""

from __future__ import annotations


class SpecError(ValueError):
    """A job spec that cannot be used; the message names the field and what to do."""


class SecretSourceError(ValueError):
    """A secret env value that cannot be had (no such variable, connection, field or key);
    the message names the env var and the source. Permanent: no retry creates a variable
    (a secrets backend that failed is not: `permanent` is then False)."""

    permanent = True


class BackendError(ValueError):
    """A job this backend cannot run (or an unknown backend); the message says what to use.
    Permanent: no retry makes a backend run what it cannot."""

    permanent = True


class UnsupportedType(BackendError):
    """A job type (or an option of it) this backend cannot run. `sentence` says why; the
    registry adds `joiner` and the backends that run the type (`registry.check`)."""

    def __init__(self, sentence: str, job_type: str, backend: str, joiner: str = ": ") -> None:
        super().__init__(f"{sentence}{joiner}see `dlc-airflow validate --backend NAME` for another backend")
        self.sentence, self.job_type, self.backend, self.joiner = sentence, job_type, backend, joiner

    def naming(self, advice: str) -> BackendError:
        """The same refusal, ending with `advice` ("use backend='jobset' or 'native'")."""
        return BackendError(f"{self.sentence}{self.joiner}{advice}")


def unsupported_type(job_type: str, backend: str, why: str) -> UnsupportedType:
    return UnsupportedType(f"job type {job_type!r} cannot run on the {backend} backend ({why})", job_type, backend)


class SubmitError(Exception):
    """The job could not be submitted; nothing of it is left behind.

    `permanent` says whether trying again can help (a refused spec or permission: no).
    """

    permanent: bool = False

    def __init__(self, message: str, *, permanent: bool = False, reason: str = "") -> None:
        super().__init__(message)
        self.permanent = permanent
        self.reason = reason  # a dlc_airflow.reasons name when one fits (QUOTA_EXCEEDED)


class OwnershipError(SubmitError):
    """Something with the job's name exists and belongs to another task instance."""

    permanent = True

    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=True)
