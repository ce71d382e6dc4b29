"""Typed exceptions. Every error the gateway answers is JSON
(`{"error": {"code", "message", "field"?}}`); ApiError carries it whole and
its subclasses say the HTTP status without a lookup."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Type


class KowloonError(Exception):
    """Base of every exception this package raises."""


class TransportError(KowloonError):
    """No answer came: the connection failed or timed out (after retries)."""


class ApiError(KowloonError):
    """The gateway answered with an error status.

    Attributes: ``status`` (HTTP status), ``code`` (``invalid_argument``,
    ``not_found``…), ``message``, ``field`` (the offending field or None),
    ``body`` (the whole error JSON, e.g. ``state`` on a 409) and
    ``retry_after`` (seconds, from ``Retry-After``, or None)."""

    def __init__(self, status: int, code: str, message: str, field: Optional[str] = None,
                 body: Optional[Dict[str, Any]] = None, retry_after: Optional[float] = None):
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.body = body or {}
        self.retry_after = retry_after
        where = f" ({field})" if field else ""
        super().__init__(f"{status} {code}: {message}{where}")


class BadRequestError(ApiError):
    """400: malformed request, unknown field, bad query value."""


class AuthenticationError(ApiError):
    """401 (no or unknown key) and 403 (an admin operation without an admin key)."""


class PermissionDeniedError(AuthenticationError):
    """403: the key may not do this."""


class NotFoundError(ApiError):
    """404: no such job, blob, output or path (another tenant's job too)."""


class NotOfferedError(NotFoundError):
    """The gateway does not offer this endpoint (an older gateway: 404 on the
    route itself, not on a resource)."""


class ConflictError(ApiError):
    """409: e.g. the result of a job that has not succeeded, a cancel of a
    finished job (``body["error"]["state"]`` when the gateway says it)."""


class PayloadTooLargeError(ApiError):
    """413: a body or blob quota over its limit."""


class ValidationError(ApiError):
    """422: the kernel call is wrong (unknown kernel or param, bad shape…);
    ``field`` names the place."""


class RateLimitError(ApiError):
    """429: rate limit or queued-jobs quota; raised once retries ran out of time."""


class UnavailableError(ApiError):
    """503: PostgreSQL or Redis unreachable, or a per-address connection limit."""


class JobFailedError(KowloonError):
    """A job ended ``failed`` or ``cancelled`` where a result was wanted.
    ``job`` is the job object (dict); ``code``/``message`` its error."""

    def __init__(self, job: Dict[str, Any]):
        self.job = job
        err = job.get("error") or {}
        self.state = job.get("state")
        self.code = err.get("code")
        self.message = err.get("message")
        detail = f": {self.code}: {self.message}" if self.code else ""
        super().__init__(f"job {job.get('id')} ended {self.state}{detail}")


class WaitTimeout(KowloonError, TimeoutError):
    """Job.wait(timeout) passed its timeout before the job ended; ``job`` is
    the job as last seen."""

    def __init__(self, job: Dict[str, Any], timeout: float):
        self.job = job
        super().__init__(f"job {job.get('id')} still {job.get('state')} after {timeout:g} s")


_BY_STATUS: Dict[int, Type[ApiError]] = {
    400: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError,
    404: NotFoundError, 409: ConflictError, 413: PayloadTooLargeError,
    422: ValidationError, 429: RateLimitError, 503: UnavailableError,
}


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds of a Retry-After header (delta-seconds form only), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        return None


def error_from_response(status: int, headers: Any, content: bytes) -> ApiError:
    """The typed ApiError for an error answer (any body; JSON expected)."""
    body: Dict[str, Any] = {}
    try:
        parsed = json.loads(content.decode("utf-8")) if content else {}
        if isinstance(parsed, dict):
            body = parsed
    except (ValueError, UnicodeDecodeError):
        pass
    raw_err = body.get("error")
    err: Dict[str, Any] = raw_err if isinstance(raw_err, dict) else {}
    code = str(err.get("code") or f"http_{status}")
    message = str(err.get("message") or content[:200].decode("utf-8", "replace") or "no message")
    cls = _BY_STATUS.get(status, ApiError)
    return cls(status, code, message, err.get("field"), body,
               parse_retry_after(headers.get("retry-after")))
