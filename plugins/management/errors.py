"""HTTP errors as JSON, in RabbitMQ's shape: `{"error": ..., "reason": ...}`.

Handlers raise `ApiError`, or let a kernel error through: `status_of` maps the kernel's AMQP
reply codes to HTTP statuses, so "no queue 'x'" is a 404 here as it is a 404 channel error
over AMQP.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from herald.core.errors import KernelError

_ERROR_NAMES = {
    400: "bad_request",
    401: "not_authorised",
    403: "access_refused",
    404: "not_found",
    405: "method_not_allowed",
    409: "resource_locked",
    413: "payload_too_large",
    500: "internal_server_error",
    501: "not_implemented",
    503: "service_unavailable",
}

_KERNEL_STATUS = {403: 403, 404: 404, 405: 409, 406: 400, 503: 400, 530: 403, 506: 503}
"""AMQP reply code -> HTTP status (405 RESOURCE_LOCKED is a conflict, 406 a bad request)."""

REALM = 'Basic realm="herald management"'


class ApiError(Exception):
    """An error answer: `status`, and a `reason` a person can act on."""

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = headers or {}


def not_found(what: str) -> ApiError:
    return ApiError(404, f"{what} not found")


def bad_request(reason: str) -> ApiError:
    return ApiError(400, reason)


def status_of(exc: KernelError) -> int:
    return _KERNEL_STATUS.get(exc.reply_code, 500)


def error_response(status: int, reason: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": _ERROR_NAMES.get(status, "error"), "reason": reason}
    return JSONResponse(body, status_code=status, headers=headers)


def unauthorised(reason: str = "Login failed") -> ApiError:
    return ApiError(401, reason, {"WWW-Authenticate": REALM})
