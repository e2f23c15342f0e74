"""An HTTP-shaped error: a status and a message that says what to fix.

Every error body has OpenAI's shape, `{"error": {"message", "type", "code"}}`, so OpenAI clients
show the message as is and our own client reads the same field.
"""

from __future__ import annotations

from typing import Optional

from fastapi.responses import JSONResponse

KINDS = {400: "invalid_request_error", 404: "not_found", 405: "invalid_request_error",
         412: "precondition_failed", 413: "request_too_large", 422: "invalid_request_error",
         431: "invalid_request_error",
         499: "client_closed_request", 500: "internal_error", 503: "unavailable", 507: "insufficient_storage",
         504: "deadline_exceeded"}


class RequestError(Exception):
    def __init__(self, status: int, message: str, retry_after: Optional[int] = None):
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after

    def body(self) -> dict:
        return error_body(self.status, self.message)

    def response(self) -> JSONResponse:
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else None
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def error_body(status: int, message: str) -> dict:
    return {"error": {"message": message, "type": KINDS.get(status, "error"), "code": status}}
