"""Asking an admin HTTP server, and checking its answers against its OpenAPI document.

`AdminClient` sends one request per connection (as the server serves them) from
a worker thread with the standard library's client.  `check_answer` finds the
operation in the document served at `/openapi.json` and checks the JSON answer
against the operation's schema for that status: the subset of JSON Schema the
document uses (`type`, possibly a list; `properties`, `required`, `items`),
with no property beyond those listed.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        assert self.content_type == "application/json", self.content_type
        return json.loads(self.body)


class AdminClient:
    def __init__(self, address: str) -> None:
        self.address = address

    async def request(self, method: str, path: str, body: Any = None) -> Answer:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://{self.address}{path}", data=data, method=method)

        def send() -> Answer:
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return Answer(
                        response.status, response.headers["Content-Type"], response.read()
                    )
            except urllib.error.HTTPError as error:
                return Answer(error.code, error.headers["Content-Type"], error.read())

        return await anyio.to_thread.run_sync(send)

    async def metrics(self) -> dict[str, Metric]:
        answer = await self.request("GET", "/metrics")
        assert answer.status == 200
        assert answer.content_type.startswith("text/plain")
        return {
            family.name: family for family in text_string_to_metric_families(answer.body.decode())
        }

    async def checked(
        self,
        document: dict[str, Any],
        method: str,
        path: str,
        body: Any = None,
        *,
        pattern: str | None = None,
    ) -> tuple[int, Any]:
        """Ask, check the JSON answer against `document`; (status, value)."""
        answer = await self.request(method, path, body)
        value = answer.json()
        check_answer(document, method, pattern or path, answer.status, value)
        return answer.status, value


def check_answer(
    document: dict[str, Any], method: str, pattern: str, status: int, value: Any
) -> None:
    operation = document["paths"][pattern][method.lower()]
    responses = operation["responses"]
    response = responses.get(str(status), responses.get("default"))
    assert response is not None, f"{method} {pattern} answered {status}, undocumented"
    if str(status) not in responses:
        assert status >= 400, f"{method} {pattern}: {status} is not documented"
    check_schema(response["content"]["application/json"]["schema"], value, f"{method} {pattern}")


def check_schema(schema: dict[str, Any], value: Any, where: str) -> None:
    kinds = schema.get("type")
    if kinds is not None:
        names = kinds if isinstance(kinds, list) else [kinds]
        allowed = tuple(kind for name in names for kind in _TYPES[name])
        assert isinstance(value, allowed), f"{where}: {value!r} is not {names}"
        assert not isinstance(value, bool) or "boolean" in names, f"{where}: {value!r} is a bool"
    if isinstance(value, dict) and "properties" in schema:
        properties = schema["properties"]
        missing = set(schema.get("required", ())) - set(value)
        assert not missing, f"{where}: missing {sorted(missing)}"
        extra = set(value) - set(properties)
        assert not extra, f"{where}: undocumented {sorted(extra)}"
        for name, item in value.items():
            check_schema(properties[name], item, f"{where}.{name}")
    if isinstance(value, list) and "items" in schema:
        for position, item in enumerate(value):
            check_schema(schema["items"], item, f"{where}[{position}]")


def sample(families: dict[str, Metric], name: str, **labels: str) -> float:
    """The value of the sample `name` (with these labels) in parsed metrics; 0 if absent."""
    for family in families.values():
        for each in family.samples:
            if each.name == name and all(each.labels.get(k) == v for k, v in labels.items()):
                return float(each.value)
    return 0.0


def metric_sum(url: str, name: str) -> float:
    """The sum of a metric's samples on the Prometheus page of the admin server at `url`
    (0 when absent)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )
