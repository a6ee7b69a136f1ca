"""An HTTP stand-in for the Kubernetes API server, for driving the real `kubernetes` client in tests.

It listens on 127.0.0.1 on an ephemeral port, answers each request from the routes a test declares
(method + path, with `{placeholders}`), and records every request it sees. It knows nothing about
Kubernetes semantics: a test declares what the cluster "says", and asserts on what the code asked.

    with FakeApiServer() as api:
        api.add("GET", "/api/v1/nodes", object_list("NodeList", [node_json]))
        api.add("POST", "/api/v1/namespaces", lambda request: Response(201, request.json))
        # Several responses are served in turn; the last one repeats (a pod that goes Pending -> Running):
        api.add("GET", "/api/v1/namespaces/{ns}/pods", pending_list, running_list)
        client = provision.kube.client.load_api_client(api.write_kubeconfig(tmp_path / "kubeconfig"))
        ...
        assert api.requests_to("DELETE", "/api/v1/namespaces/")

A route added later wins over an earlier one with the same method and a matching path, so a test can
start from shared defaults and override one answer. Unmatched requests get a 404 `Status` (as the real
server answers for a missing object) and are recorded like any other.

A list a GET answers (a body with `items`) is filtered as the real server filters it: by the request's
`labelSelector` (equality, inequality, existence, `in` and `notin`) and `fieldSelector` (`path=value` and
`path!=value` on dotted paths such as `spec.nodeName`), so code that asks for the wrong selector sees what
it asked for, not what the test happened to declare.
"""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes
    # Values of the route's {placeholders}; empty for unmatched requests.
    params: dict[str, str] = field(default_factory=dict)

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    def query_value(self, key: str) -> str | None:
        values = self.query.get(key)
        return values[0] if values else None


@dataclass(frozen=True)
class Response:
    status: int = 200
    # dict/list: sent as JSON; str/bytes: sent as they are (text/plain unless content_type says otherwise).
    body: Any = None
    content_type: str | None = None


def status(code: int, reason: str, message: str) -> Response:
    """A Kubernetes `Status` error body, as the API server sends for 404, 409, 422, ..."""
    return Response(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": message, "reason": reason, "code": code})


def object_list(kind: str, items: list[dict[str, Any]], api_version: str = "v1") -> dict[str, Any]:
    """A list response (`PodList`, `NodeList`, ...) around the given items."""
    return {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "1"}, "items": items}


_SET_REQUIREMENT = re.compile(r"\s*(!?)\s*([A-Za-z0-9._/-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9._-]*)|\s+(in|notin)\s*"
                              r"\(([^)]*)\))?\s*", re.ASCII)


_FIELD_REQUIREMENT = re.compile(r"\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*", re.ASCII)


def _split_selector(selector: str) -> list[str]:
    """A selector's requirements: split at the commas outside `in (...)` sets."""
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [part for part in [*parts, current] if part.strip()]


def label_selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Whether labels satisfy a Kubernetes label selector (every requirement, as the API server reads them)."""
    for requirement in _split_selector(selector):
        found = _SET_REQUIREMENT.fullmatch(requirement)
        if found is None:
            raise ValueError(f"the stand-in cannot read the label selector {selector!r}")
        negated, key, operator, value, set_operator, values = found.groups()
        if operator in ("=", "=="):
            ok = labels.get(key) == value
        elif operator == "!=":
            ok = labels.get(key) != value
        elif set_operator:
            members = {v.strip() for v in values.split(",") if v.strip()}
            ok = labels.get(key) in members if set_operator == "in" else labels.get(key) not in members
        else:
            ok = (key in labels) != bool(negated)
        if not ok:
            return False
    return True


def field_selector_matches(selector: str, item: dict[str, Any]) -> bool:
    """Whether an object satisfies a field selector (`spec.nodeName=n1,status.phase!=Succeeded`)."""
    for requirement in _split_selector(selector):
        found = _FIELD_REQUIREMENT.fullmatch(requirement)
        if found is None:
            raise ValueError(f"the stand-in cannot read the field selector {selector!r}")
        path, operator, value = found.groups()
        actual: Any = item
        for part in path.split("."):
            actual = actual.get(part) if isinstance(actual, dict) else None
        if (("" if actual is None else str(actual)) == value) != (operator != "!="):
            return False
    return True


def _filtered(request: RecordedRequest, response: Response) -> Response:
    """A GET's list answer less the items the request's selectors leave out."""
    labels, fields = request.query_value("labelSelector"), request.query_value("fieldSelector")
    body = response.body
    if request.method != "GET" or not (labels or fields) or not isinstance(body, dict) or \
            not isinstance(body.get("items"), list):
        return response
    try:
        items = [item for item in body["items"]
                 if (not labels or label_selector_matches(labels, (item.get("metadata") or {}).get("labels") or {}))
                 and (not fields or field_selector_matches(fields, item))]
    except ValueError as exc:
        return status(400, "BadRequest", str(exc))
    return Response(response.status, body | {"items": items}, response.content_type)


class _Route:
    def __init__(self, method: str, pattern: str, answers: list[Any]) -> None:
        self.method = method.upper()
        self.pattern = pattern
        names: list[str] = []

        def placeholder(match: re.Match[str]) -> str:
            names.append(match.group(1))
            return f"(?P<{match.group(1)}>[^/]+)"

        self.regex = re.compile("^" + re.sub(r"\\\{(\w+)\\\}", placeholder, re.escape(pattern)) + "$")
        self.answers = answers
        self.served = 0

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if method != self.method:
            return None
        found = self.regex.match(path)
        return found.groupdict() if found else None

    def next_answer(self) -> Any:
        answer = self.answers[min(self.served, len(self.answers) - 1)]
        self.served += 1
        return answer


class FakeApiServer:
    """See the module docstring. Use as a context manager, or call start() and stop()."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._routes: list[_Route] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- routes and what was asked ------------------------------------------------------------------
    def add(self, method: str, path: str, *answers: Any) -> None:
        """Answer `method path` with `answers` in turn (the last one repeats). An answer is a Response,
        a JSON-able dict or list (200), a str or bytes (200, text/plain), or a callable taking the
        RecordedRequest and returning any of those."""
        if not answers:
            raise ValueError("add() needs at least one answer")
        with self._lock:
            self._routes.append(_Route(method, path, list(answers)))

    def requests_to(self, method: str, path_prefix: str = "") -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.method == method.upper() and r.path.startswith(path_prefix)]

    # -- lifecycle ----------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the stand-in API server is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeApiServer:
        fake = self

        class RequestHandler(BaseHTTPRequestHandler):
            def do_GET(self) -> None: fake._handle(self)
            def do_POST(self) -> None: fake._handle(self)
            def do_PUT(self) -> None: fake._handle(self)
            def do_PATCH(self) -> None: fake._handle(self)
            def do_DELETE(self) -> None: fake._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean; every request is in fake.requests

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), RequestHandler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig for this server (plain HTTP, a dummy bearer token), for load_api_client()."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # -- serving ------------------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        method = handler.command.upper()
        with self._lock:
            route, params = None, {}
            for candidate in reversed(self._routes):
                found = candidate.match(method, parts.path)
                if found is not None:
                    route, params = candidate, found
                    break
            request = RecordedRequest(method, parts.path, parse_qs(parts.query), body, params)
            self.requests.append(request)
            answer = route.next_answer() if route else status(
                404, "NotFound", f"the stand-in has no route for {method} {parts.path}")
        if callable(answer):
            answer = answer(request)
        self._send(handler, _filtered(request, answer if isinstance(answer, Response) else Response(200, answer)))

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, response: Response) -> None:
        body = response.body
        # A JSON scalar (a number, true/false) is sent as JSON too: `bytes(5)` would be five NUL bytes.
        if isinstance(body, (dict, list, bool, int, float)):
            payload, content_type = json.dumps(body).encode(), "application/json"
        elif isinstance(body, str):
            payload, content_type = body.encode(), "text/plain"
        elif body is None:
            payload, content_type = b"", "application/json"
        else:
            payload, content_type = bytes(body), "application/octet-stream"
        handler.send_response(response.status)
        handler.send_header("Content-Type", response.content_type or content_type)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)
