"""Building the OpenAPI 3.1 documents of the admin HTTP APIs, compactly.

`obj(name=type, ...)` is a JSON Schema object whose every property is
required; a type is a JSON Schema type name, a list of them (`["string",
"null"]`), or a schema.  `get` and `post` describe one operation answering
JSON; `document` puts the paths together with the two answers that are not
JSON (`/metrics` in Prometheus's text format, `/openapi.json` itself).
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]


def _schema(kind: str | list[str] | Schema) -> Schema:
    if isinstance(kind, dict):
        return kind
    return {"type": kind}


def obj(**properties: str | list[str] | Schema) -> Schema:
    return {
        "type": "object",
        "required": sorted(properties),
        "properties": {name: _schema(kind) for name, kind in properties.items()},
    }


def _json(schema: Schema) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _errors() -> dict[str, Any]:
    return {"default": {"description": "an error", **_json(obj(error="string"))}}


def get(
    summary: str,
    schema: Schema,
    *,
    parameter: str | None = None,
    statuses: tuple[int, ...] = (200,),
) -> dict[str, Any]:
    """One GET answering `schema` with each of `statuses` (503 too: `/ready`)."""
    answers = {str(status): {"description": summary, **_json(schema)} for status in statuses}
    operation: dict[str, Any] = {"summary": summary, "responses": {**answers, **_errors()}}
    if parameter is not None:
        operation["parameters"] = [
            {"name": parameter, "in": "path", "required": True, "schema": {"type": "string"}}
        ]
    return {"get": operation}


def post(summary: str, body: Schema | None, schema: Schema) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "responses": {"202": {"description": summary, **_json(schema)}, **_errors()},
    }
    if body is not None:
        operation["requestBody"] = {"required": True, **_json(body)}
    return {"post": operation}


def document(title: str, paths: dict[str, Any]) -> dict[str, Any]:
    text = {"text/plain": {"schema": {"type": "string"}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": "1"},
        "paths": {
            "/metrics": {
                "get": {
                    "summary": "metrics in Prometheus's text format",
                    "responses": {"200": {"description": "metrics", "content": text}},
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "this document",
                    "responses": {"200": {"description": "this document", **_json({})}},
                }
            },
            **paths,
        },
    }
