"""The HTTP side of `herald admin`: one synchronous httpx client for the management API.

A CLI command makes a handful of requests and exits, so a blocking client is the simple fit
(no event loop to start). Every failure becomes an `AdminError` (admin_common.py): the API's
own JSON `reason` when it answered, or why it could not be reached.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

import httpx

from herald.plugins.management.admin_common import AdminError

DEFAULT_URL = "http://127.0.0.1:15672"


class AdminClient:
    """Requests to one management API as one user; JSON in, JSON out."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        user: str = "guest",
        password: str = "guest",
        *,
        verify: str | bool | ssl.SSLContext = True,
        timeout: float = 30.0,
    ) -> None:
        self.url = url.rstrip("/")
        if isinstance(verify, str):  # a CA file: trust it (and only it) for HTTPS
            verify = ssl.create_default_context(cafile=verify)
        self._http = httpx.Client(
            base_url=self.url, auth=(user, password), verify=verify, timeout=timeout
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """The answer's JSON (None when it has no body); AdminError on any failure."""
        try:
            response = self._http.request(
                method,
                path,
                params=params,
                headers=headers,
                content=None if body is None else json.dumps(body),
            )
        except httpx.HTTPError as exc:
            raise AdminError(f"cannot reach the management API at {self.url}: {exc}") from None
        if response.status_code >= 400:
            raise AdminError(_reason(response))
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return response.text

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})


def _reason(response: httpx.Response) -> str:
    """`<status> <error>: <reason>` from the API's JSON error, or the raw answer."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "reason" in body:
        return f"{response.status_code} {body.get('error', 'error')}: {body['reason']}"
    text = response.text.strip()[:200] or response.reason_phrase
    return f"{response.status_code}: {text}"
