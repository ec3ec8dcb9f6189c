"""A real local OpenAI-compatible chat-completions server for tests.

``FakeLLM`` runs an ``http.server.ThreadingHTTPServer`` on 127.0.0.1 (a free
port) in a background thread and answers ``POST /v1/chat/completions`` in the
OpenAI response shape. What it answers is chosen per request:

1. scripted responses queued with :meth:`FakeLLM.fail_first` / :meth:`FakeLLM.script`
   (consumed one per request, in order);
2. marker rules added with :meth:`FakeLLM.fail_when` (the first rule whose
   marker occurs in the prompt; optionally only ``times`` times);
3. the ``answers`` rule: a callable ``prompt -> str | Reply``, a dict
   ``{substring: answer}`` (first matching key, in insertion order), or a
   fixed string; else ``default``.

A :class:`Reply` is either plain content (``Reply(content="[]")``) or a
failure: an HTTP status with a body and headers (``FakeLLM.rate_limited(3)``
sends 429 with ``Retry-After: 3``; ``server_error()``, ``http_error(400)``),
an invalid JSON body (``invalid_json()``) or a hijacked prose answer
(``hijacked()``). ``trickling(1.0)`` sends a whole answer, status line included,
one byte a second (until the client hangs up or the server stops). When
``api_key`` is set, requests without ``Authorization: Bearer <api_key>`` get a 401.

Every request is recorded in :attr:`FakeLLM.requests` (headers, JSON body,
prompt, status sent). Use it as a context manager, or as a fixture::

    @pytest.fixture
    def fake():
        yield from fake_llm(answers={"Berlin": '[...]'})
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["HIJACKED_TUTORIAL", "FakeLLM", "RecordedRequest", "Reply", "fake_llm"]

HIJACKED_TUTORIAL = (
    "Certainly! Here's a quick tutorial on Python decorators.\n\n"
    "## What is a decorator?\n\n"
    "A decorator is a function that takes another function and extends its behaviour "
    "without explicitly modifying it.\n\n"
    "```python\ndef my_decorator(func):\n    def wrapper():\n        print('before')\n"
    "        func()\n    return wrapper\n```\n\n"
    "I hope this helps! Let me know if you have any other questions."
)


@dataclass(frozen=True)
class Reply:
    """One canned reply: content (status 200) or a failure."""

    content: str | None = None
    status: int = 200
    body: str | None = None  # raw body, overrides the OpenAI envelope
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    finish_reason: str = "stop"
    trickle_s: float = 0.0  # > 0: send the raw response one byte per trickle_s seconds


@dataclass
class RecordedRequest:
    """What the server received, and the status it sent back."""

    path: str
    headers: dict[str, str]
    body: Any
    prompt: str
    status: int = 0

    @property
    def authorization(self) -> str | None:
        """The Authorization header, if any."""
        return self.headers.get("authorization")


Answer = str | Reply
AnswerRule = Callable[[str], Answer] | Mapping[str, Answer] | str | None


class FakeLLM:
    """A scripted, recording, OpenAI-compatible chat-completions server."""

    def __init__(
        self,
        answers: AnswerRule = None,
        *,
        default: str = "[]",
        api_key: str | None = None,
        model: str = "fake-model",
    ) -> None:
        self.answers = answers
        self.default = default
        self.api_key = api_key
        self.model = model
        self.requests: list[RecordedRequest] = []
        self._queue: list[Reply] = []
        self._rules: list[list[Any]] = []  # [marker, reply, remaining or None]
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._counter = 0

    # -- canned failures ---------------------------------------------------------

    @staticmethod
    def rate_limited(retry_after: float | None = None) -> Reply:
        """HTTP 429 (with ``Retry-After`` when given)."""
        headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
        body = _error_body("Rate limit reached for requests", "rate_limit_exceeded")
        return Reply(status=429, body=body, headers=headers)

    @staticmethod
    def quota_exceeded() -> Reply:
        """HTTP 403 mentioning the quota."""
        return Reply(status=403, body=_error_body("You exceeded your current quota", "quota"))

    @staticmethod
    def server_error(status: int = 500) -> Reply:
        """HTTP 5xx."""
        return Reply(status=status, body=_error_body("The server had an error", "server_error"))

    @staticmethod
    def http_error(status: int, message: str = "Bad request") -> Reply:
        """Any HTTP error status with an OpenAI-style error body."""
        return Reply(status=status, body=_error_body(message, "invalid_request_error"))

    @staticmethod
    def invalid_json() -> Reply:
        """HTTP 200 whose body is not JSON."""
        return Reply(status=200, body='{"id": "chatcmpl-broken", "choices": [')

    @staticmethod
    def hijacked(text: str = HIJACKED_TUTORIAL) -> Reply:
        """A well-formed completion whose content obeys the source (a tutorial)."""
        return Reply(content=text)

    @staticmethod
    def trickling(seconds_per_byte: float = 1.0) -> Reply:
        """A good answer sent one byte at a time, ``seconds_per_byte`` apart: every read
        gets a byte well within any per-read timeout, the whole takes minutes."""
        return Reply(content="[]", trickle_s=seconds_per_byte)

    # -- scripting -------------------------------------------------------------------

    def script(self, *replies: Answer) -> FakeLLM:
        """Queue replies for the next requests, one each, in order."""
        with self._lock:
            self._queue.extend(_as_reply(r) for r in replies)
        return self

    def fail_first(self, n: int, reply: Reply | None = None) -> FakeLLM:
        """Answer the next ``n`` requests with ``reply`` (default: HTTP 500)."""
        return self.script(*([reply or self.server_error()] * n))

    def fail_when(self, marker: str, reply: Answer, times: int | None = None) -> FakeLLM:
        """Answer prompts containing ``marker`` with ``reply`` (``times`` times, or always)."""
        with self._lock:
            self._rules.append([marker, _as_reply(reply), times])
        return self

    def _choose(self, prompt: str) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.pop(0)
            for rule in self._rules:
                marker, reply, remaining = rule
                if marker in prompt and (remaining is None or remaining > 0):
                    if remaining is not None:
                        rule[2] = remaining - 1
                    return reply
        rule_answers = self.answers
        if callable(rule_answers):
            return _as_reply(rule_answers(prompt))
        if isinstance(rule_answers, Mapping):
            for needle, answer in rule_answers.items():
                if needle in prompt:
                    return _as_reply(answer)
            return Reply(content=self.default)
        if isinstance(rule_answers, str):
            return Reply(content=rule_answers)
        return Reply(content=self.default)

    # -- life cycle --------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The API root to configure a provider with (``http://127.0.0.1:PORT/v1``)."""
        if self._server is None:
            raise RuntimeError("FakeLLM is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeLLM:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread."""
        if self._server is not None:
            return self
        handler = type("_BoundHandler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close the socket and join the thread."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    @property
    def running(self) -> bool:
        """True while the server thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- handling ------------------------------------------------------------------------

    def _record(self, rec: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(rec)

    def _next_id(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    def handle(self, path: str, headers: dict[str, str],
               raw: bytes) -> tuple[int, dict, bytes, float]:
        """Produce (status, headers, body, trickle seconds) for one request, and record it."""
        try:
            body: Any = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            body = None
        messages = body.get("messages") if isinstance(body, dict) else None
        prompt = ""
        if isinstance(messages, list):
            prompt = "\n".join(
                str(m.get("content", "")) for m in messages if isinstance(m, dict)
            )
        rec = RecordedRequest(path=path, headers=headers, body=body, prompt=prompt)
        self._record(rec)
        reply, (status, out_headers, out) = self._respond(path, headers, body, messages, prompt)
        rec.status = status
        return status, out_headers, out, reply.trickle_s if reply else 0.0

    def _respond(
        self, path: str, headers: dict[str, str], body: Any, messages: Any, prompt: str
    ) -> tuple[Reply | None, tuple[int, dict, bytes]]:
        if path.rstrip("/") != "/v1/chat/completions":
            return None, _json(404, json.loads(_error_body(f"no route {path}", "not_found")))
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return None, _json(401, json.loads(_error_body("Incorrect API key provided", "auth")))
        if not isinstance(messages, list) or not messages:
            return None, _json(400, json.loads(_error_body("'messages' is required",
                                                           "bad_request")))
        reply = self._choose(prompt)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.body is not None:
            hdrs = {"Content-Type": "application/json", **dict(reply.headers)}
            return reply, (reply.status, hdrs, reply.body.encode("utf-8"))
        content = reply.content if reply.content is not None else self.default
        n = self._next_id()
        completion = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt) // 4,
                "completion_tokens": len(content) // 4,
                "total_tokens": len(prompt) // 4 + len(content) // 4,
            },
        }
        status, hdrs, out = _json(reply.status, completion)
        hdrs.update(reply.headers)
        return reply, (status, hdrs, out)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeLLM
    server_version = "FakeLLM/1.0"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, out_headers, out, trickle_s = self.fake.handle(self.path, headers, raw)
        if trickle_s:
            self._trickle(status, out_headers, out, trickle_s)
            return
        self.send_response(status)
        for key, value in out_headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def _trickle(self, status: int, headers: dict, out: bytes, seconds: float) -> None:
        lines = [f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}",
                 *(f"{k}: {v}" for k, v in headers.items()), f"Content-Length: {len(out)}"]
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + out
        self.close_connection = True
        for i in range(len(data)):
            if not self.fake.running:
                return
            try:
                self.wfile.write(data[i:i + 1])
            except OSError:  # the client gave up: that is the point
                return
            time.sleep(seconds)

    def do_GET(self) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.fake._record(RecordedRequest(path=self.path, headers=headers, body=None, prompt="",
                                          status=405))
        out = _error_body("use POST /v1/chat/completions", "method_not_allowed").encode()
        self.send_response(405)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: requests are recorded, not logged."""


def _error_body(message: str, code: str) -> str:
    return json.dumps({"error": {"message": message, "type": code, "code": code}})


def _json(status: int, obj: Any) -> tuple[int, dict, bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(obj).encode("utf-8")


def _as_reply(answer: Answer) -> Reply:
    return answer if isinstance(answer, Reply) else Reply(content=str(answer))


def fake_llm(answers: AnswerRule = None, **kwargs: Any) -> Iterator[FakeLLM]:
    """Fixture helper: ``yield from fake_llm(...)`` inside a pytest fixture."""
    with FakeLLM(answers, **kwargs) as fake:
        yield fake
