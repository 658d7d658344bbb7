"""API errors the simulator answers with, in the body shape the real Messages API uses."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping

# HTTP status -> the `error.type` the real API uses for it.
ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

# Default messages, worded like the real service's.
DEFAULT_MESSAGES: Mapping[int, str] = {
    401: "invalid x-api-key",
    403: "Your account does not have permission to use this resource.",
    429: "This request would exceed your account's rate limit. Please try again later.",
    500: "Internal server error",
    529: "Overloaded",
}


def new_request_id() -> str:
    """A request id in the real service's `req_…` style."""
    return "req_sim_" + uuid.uuid4().hex[:24]


class ApiError(Exception):
    """An error answered as `{"type": "error", "error": {...}}` with an HTTP status and extra headers."""

    def __init__(self, status: int, message: str | None = None, headers: Mapping[str, str] | None = None):
        self.status = status
        self.error_type = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        self.message = message if message is not None else DEFAULT_MESSAGES.get(status, f"HTTP {status}")
        self.headers: dict[str, str] = dict(headers or {})
        super().__init__(f"{status} {self.error_type}: {self.message}")

    def body(self, request_id: str) -> bytes:
        """The JSON body, e.g. `{"type":"error","error":{"type":"not_found_error","message":"model: x"}}`."""
        return json.dumps(
            {
                "type": "error",
                "error": {"type": self.error_type, "message": self.message},
                "request_id": request_id,
            }
        ).encode()
