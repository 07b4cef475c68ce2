"""The OpenAPI 3.1 document, built from the endpoint declarations (built-in and contributed),
so it always lists exactly what is mounted."""

from __future__ import annotations

import re
from typing import Any

from herald.plugins.management.endpoints import Endpoint

_PARAM = re.compile(r"{(\w+)}")

_ERROR = {
    "description": "An error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def _operation(endpoint: Endpoint) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string"},
            "description": "percent-encoded (the vhost '/' is %2F)" if name == "vhost" else "",
        }
        for name in _PARAM.findall(endpoint.path)
    ]
    parameters += [
        {"name": name, "in": "query", "required": False, "schema": {"type": "string"}}
        for name in endpoint.query
    ]
    operation: dict[str, Any] = {
        "summary": endpoint.summary,
        "operationId": f"{endpoint.method.lower()}_{endpoint.handler.__name__}",
        "tags": [endpoint.tag],
        "parameters": parameters,
        "x-herald-level": endpoint.level.value,
        "responses": {
            "200": {"description": "OK (JSON)"},
            "201": {"description": "Created"},
            "204": {"description": "Done, no content"},
            "400": _ERROR,
            "401": _ERROR,
            "403": _ERROR,
            "404": _ERROR,
        },
    }
    if endpoint.body is not None:
        operation["requestBody"] = {
            "required": endpoint.method in ("POST",),
            "description": endpoint.body,
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    return operation


def build(endpoints: list[Endpoint], version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in endpoints:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "herald management API",
            "version": version,
            "description": "RabbitMQ-compatible in shape where the concepts match; "
            "herald's own additions are marked herald_* in bodies.",
        },
        "servers": [{"url": "/"}],
        "security": [{"basic": []}],
        "paths": dict(sorted(paths.items())),
        "components": {
            "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "properties": {"error": {"type": "string"}, "reason": {"type": "string"}},
                    "required": ["error", "reason"],
                }
            },
        },
    }
