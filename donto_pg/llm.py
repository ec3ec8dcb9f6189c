"""A small OpenAI-compatible chat-completions client with provider rotation.

Providers are configured in a TOML file of ``[[provider]]`` tables, tried in
the order given::

    # providers.toml
    [[provider]]
    name = "groq"                                  # unique; used in errors and logs
    base_url = "https://api.groq.com/openai/v1"    # POSTs go to {base_url}/chat/completions
    model = "llama-3.3-70b-versatile"
    api_key_env = "GROQ_API_KEY"                   # env var holding the key (optional)
    timeout = 60                                   # seconds per connect or read (default 60)
    deadline = 300                                 # seconds for the whole request (default 300)
    max_tokens = 4096                              # default 2048
    temperature = 0.0                              # default 0.0

    [[provider]]
    name = "local"
    base_url = "http://127.0.0.1:8080/v1"          # no api_key_env: no Authorization header
    model = "qwen2.5-7b-instruct"

    [[provider]]
    name = "baseline"                              # the offline rule-based extractor: no HTTP

Keys never go in the file (an ``api_key`` entry is rejected): the variable
named by ``api_key_env`` is read at call time and sent as ``Authorization:
Bearer <key>``; it is never stored, logged or put in an error message, and a
provider that echoes it back (in an error or in a 200 answer) has it replaced by
``***`` before the answer leaves this module.

:class:`ProviderPool` sends each request to the current provider. On HTTP 429,
a quota error (403 whose body mentions "quota"), a 5xx, a connection error or
timeout, a request that outlives its provider's ``deadline`` (a server that
trickles its answer never trips the per-read ``timeout``: the deadline cuts the
socket off), or a malformed 200 response it puts that provider in a cool-down
(``Retry-After`` when the server sends one, else exponential backoff with
jitter), rotates to the next provider, and sleeps only when every provider is
cooling down. Any other 4xx raises :class:`ProviderFatalError` at once. When
all attempts fail it raises :class:`ProviderError` naming each provider's
last error. The pool is thread-safe: share one between the workers of a
``ThreadPoolExecutor``.

The provider name ``baseline`` is special: it answers locally with
:mod:`donto_pg.core.rule_extractor` (model ``donto-baseline-v3``), so the whole
pipeline runs offline (``ProviderPool.baseline()``).
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import email.utils
import http.client
import json
import logging
import math
import os
import random
import socket
import threading
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from donto_pg.core import rule_extractor

__all__ = [
    "BASELINE",
    "Completion",
    "Provider",
    "ProviderError",
    "ProviderFatalError",
    "ProviderPool",
    "load_providers",
]

log = logging.getLogger(__name__)

#: The special provider name answered locally by the rule-based extractor.
BASELINE = "baseline"

#: Seconds a whole request may take (connect, send, every read) before the next provider is
#: tried; a provider's ``deadline`` overrides it. Generous for a long completion at a slow
#: provider, short enough that a stalled one cannot hold a run.
DEFAULT_DEADLINE_S = 300.0

#: The most bytes of an answer read from a provider; a larger one is refused unread (the
#: database keeps at most 5,000,000 characters of a response, and a character is at most
#: 6 bytes in JSON's escapes). Without it a hostile provider's answer filled memory.
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
#: The most bytes of an error answer read (its message is all that is used).
MAX_ERROR_BYTES = 64 * 1024

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
_SNIPPET = 300


@dataclass(frozen=True)
class Provider:
    """One OpenAI-compatible endpoint (or the local ``baseline``).

    ``base_url`` is the API root, e.g. ``https://api.openai.com/v1``; requests go
    to ``{base_url}/chat/completions``. ``api_key_env`` names the environment
    variable holding the key (None: send no Authorization header). ``timeout``
    bounds each connect and each read; ``deadline`` the whole request.
    """

    name: str
    base_url: str = ""
    model: str = ""
    api_key_env: str | None = None
    timeout: float = 60.0
    max_tokens: int = 2048
    temperature: float = 0.0
    deadline: float = DEFAULT_DEADLINE_S

    @property
    def is_baseline(self) -> bool:
        """True for the local rule-based provider."""
        return self.name == BASELINE

    @property
    def endpoint(self) -> str:
        """The chat-completions URL."""
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass(frozen=True)
class Completion:
    """One successful completion."""

    text: str
    provider: str
    model: str
    usage: dict[str, Any] = field(default_factory=dict)
    latency_s: float = 0.0
    finish_reason: str | None = None


class ProviderError(RuntimeError):
    """Every attempt failed; ``errors`` maps provider name -> its last error."""

    def __init__(self, message: str, errors: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.errors: dict[str, str] = dict(errors or {})


class ProviderFatalError(ProviderError):
    """A non-retryable failure (a 4xx such as 400/401/404, or a missing API key)."""

    def __init__(self, provider: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{provider}: {message}", {provider: message})
        self.provider = provider
        self.status = status


class _Retryable(Exception):
    """A failure worth retrying elsewhere (429, quota, 5xx, network, malformed reply)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# --- configuration ----------------------------------------------------------

_FIELDS = {"name", "base_url", "model", "api_key_env", "timeout", "deadline", "max_tokens",
           "temperature"}


def _provider_from_table(i: int, table: Any) -> Provider:
    where = f"[[provider]] #{i + 1}"
    if not isinstance(table, dict):
        raise ValueError(f"{where}: not a table")
    if "api_key" in table:
        raise ValueError(
            f"{where}: do not put keys in the config; name an environment variable "
            "with api_key_env instead"
        )
    unknown = set(table) - _FIELDS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} (allowed: {sorted(_FIELDS)})")
    name = table.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{where}: 'name' must be a non-empty string")
    if name == BASELINE:
        return Provider(name=BASELINE, model=rule_extractor.BASELINE_MODEL)
    for key in ("base_url", "model"):
        if not isinstance(table.get(key), str) or not table[key].strip():
            raise ValueError(f"{where} ({name}): '{key}' must be a non-empty string")
    scheme = urllib.parse.urlsplit(table["base_url"]).scheme
    if scheme not in {"http", "https"}:
        raise ValueError(f"{where} ({name}): base_url must be an http(s) URL")
    env = table.get("api_key_env")
    if env is not None and (not isinstance(env, str) or not env.strip()):
        raise ValueError(f"{where} ({name}): 'api_key_env' must be a variable name")
    try:
        timeout = float(table.get("timeout", 60.0))
        deadline = float(table.get("deadline", DEFAULT_DEADLINE_S))
        max_tokens = int(table.get("max_tokens", 2048))
        temperature = float(table.get("temperature", 0.0))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where} ({name}): {exc}") from None
    if not (math.isfinite(timeout) and math.isfinite(deadline) and math.isfinite(temperature)) \
            or min(timeout, deadline) <= 0 or max_tokens <= 0:
        raise ValueError(f"{where} ({name}): timeout, deadline and max_tokens must be positive "
                         "(and numbers: nan and inf are not)")
    return Provider(
        name=name,
        base_url=table["base_url"],
        model=table["model"],
        api_key_env=env,
        timeout=timeout,
        deadline=deadline,
        max_tokens=max_tokens,
        temperature=temperature,
    )


def load_providers(path: str | Path) -> list[Provider]:
    """Read the ``[[provider]]`` tables of a TOML file (format: see the module docstring).

    Raises ``ValueError`` on an invalid file: no providers, a duplicate name, a
    missing ``base_url``/``model``, an unknown key or a literal ``api_key``.
    """
    with open(path, "rb") as fh:
        try:
            data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: invalid TOML: {exc}") from None
    tables = data.get("provider")
    if not isinstance(tables, list) or not tables:
        raise ValueError(f"{path}: no [[provider]] tables")
    providers = [_provider_from_table(i, t) for i, t in enumerate(tables)]
    names = [p.name for p in providers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{path}: duplicate provider names {dupes}")
    return providers


# --- HTTP ---------------------------------------------------------------------


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_message(body: str) -> str:
    """The message of an OpenAI-style error body, else a snippet of the body."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"][:_SNIPPET]
        if isinstance(err, str):
            return err[:_SNIPPET]
    return " ".join(body.split())[:_SNIPPET] or "(empty body)"


def _content(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    raise _Retryable(f"malformed response: content is a {type(content).__name__}")


class _Deadline:
    """Cuts one request off after ``seconds`` of wall-clock time.

    The socket timeout bounds each connect and read, not their sum: a server that
    sends a byte a second holds a request forever. A timer shuts the request's socket
    down when the time is up, which ends any read blocked on it; ``expired`` tells why.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def watch(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def connection(self, base: type[http.client.HTTPConnection]) -> Callable[..., Any]:
        """A factory for urllib's ``do_open``: ``base`` connections whose sockets we watch
        (from the TCP connect on, so a proxy tunnel and the TLS handshake count too)."""

        def make(host: str, **kwargs: Any) -> http.client.HTTPConnection:
            conn = base(host, **kwargs)
            create = conn._create_connection  # type: ignore[attr-defined]
            conn._create_connection = (  # type: ignore[attr-defined]
                lambda *a, **k: self.watch(create(*a, **k)))
            return conn

        return make


def _shut(sock: socket.socket) -> None:
    # socket.socket.shutdown, not SSLSocket's: end the TCP stream under a blocked reader
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(self._deadline.connection(http.client.HTTPConnection), req)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Follow no redirect: urllib's handler re-sent a POST as a GET to wherever the
    provider pointed, with every header, the API key included. A 3xx is an HTTP error."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(self._deadline.connection(http.client.HTTPSConnection), req,
                            context=self._context)  # type: ignore[attr-defined]


class _Http:
    """Posts one chat-completions request and classifies the outcome."""

    def post(
        self, provider: Provider, messages: Sequence[Mapping[str, str]], key: str | None
    ) -> Completion:
        payload = {
            "model": provider.model,
            "messages": [dict(m) for m in messages],
            "temperature": provider.temperature,
            "max_tokens": provider.max_tokens,
        }
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(
            provider.endpoint,
            data=json.dumps(payload).encode("utf-8"),
            headers=headers,
            method="POST",
        )
        host = urllib.parse.urlsplit(provider.endpoint).hostname or ""
        started = time.monotonic()
        error: urllib.error.HTTPError | None = None
        with _Deadline(provider.deadline) as deadline:
            # one opener per request: its handlers carry this request's deadline
            opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({} if host in _LOOPBACK else None),
                _HTTPHandler(deadline), _HTTPSHandler(deadline), _NoRedirect())
            try:
                try:
                    with opener.open(request, timeout=provider.timeout) as resp:
                        raw = resp.read(MAX_RESPONSE_BYTES + 1)
                except urllib.error.HTTPError as exc:
                    error = exc
                    raw = exc.read(MAX_ERROR_BYTES) if exc.fp is not None else b""
            except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets
                if not deadline.expired:
                    reason = getattr(exc, "reason", None) or exc
                    raise _Retryable(f"connection error: {reason}") from None
        if deadline.expired:
            raise _Retryable(f"no complete answer within the {provider.deadline:g}s deadline")
        if error is not None:
            body = raw.decode("utf-8", "replace")
            raise self._status_error(provider, error.code, body, error.headers)
        if len(raw) > MAX_RESPONSE_BYTES:
            raise _Retryable(f"an answer larger than {MAX_RESPONSE_BYTES} bytes: refused unread")
        latency = time.monotonic() - started
        return self._parse(provider, raw, latency)

    @staticmethod
    def _status_error(
        provider: Provider, status: int, body: str, headers: Any
    ) -> _Retryable | ProviderFatalError:
        """Classify an HTTP error status: retryable (429, quota, 5xx) or fatal (other 4xx)."""
        message = _error_message(body)
        retry_after = _retry_after(headers.get("Retry-After") if headers is not None else None)
        if status == 429:
            return _Retryable(f"HTTP 429 rate limited: {message}", retry_after)
        if status == 403 and "quota" in body.lower():
            return _Retryable(f"HTTP 403 quota exceeded: {message}", retry_after)
        if status >= 500:
            return _Retryable(f"HTTP {status} server error: {message}", retry_after)
        hint = ""
        if 300 <= status < 400:
            where = headers.get("Location") if headers is not None else None
            hint = (f" (the provider redirected to {where!r}; donto-pg follows no redirect, "
                    "which would send the API key elsewhere: set base_url to where it points "
                    "if you trust it)")
        elif status in (401, 403):
            env = provider.api_key_env
            hint = f" (check the API key in ${env})" if env else " (no api_key_env configured)"
        elif status == 404:
            hint = f" (check base_url {provider.base_url!r} and model {provider.model!r})"
        return ProviderFatalError(provider.name, f"HTTP {status}: {message}{hint}", status)

    @staticmethod
    def _parse(provider: Provider, raw: bytes, latency: float) -> Completion:
        try:
            data = json.loads(raw.decode("utf-8", "replace"))
        except json.JSONDecodeError:
            snippet = " ".join(raw.decode("utf-8", "replace").split())[:80]
            raise _Retryable(f"malformed response: body is not JSON ({snippet!r})") from None
        if not isinstance(data, dict):
            raise _Retryable("malformed response: body is not a JSON object")
        if data.get("error"):
            raise _Retryable(f"error in a 200 response: {_error_message(json.dumps(data))}")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise _Retryable("malformed response: no choices")
        text = _content(choices[0].get("message"))
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        model = data.get("model") if isinstance(data.get("model"), str) else provider.model
        return Completion(
            text=text,
            provider=provider.name,
            model=model or provider.model,
            usage=dict(usage),
            latency_s=latency,
            finish_reason=choices[0].get("finish_reason"),
        )


def _baseline_complete(provider: Provider, messages: Sequence[Mapping[str, str]]) -> Completion:
    started = time.monotonic()
    prompt = next(
        (m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), ""
    )
    text = rule_extractor.extract_from_prompt(prompt)
    return Completion(
        text=text,
        provider=provider.name,
        model=rule_extractor.BASELINE_MODEL,
        usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        latency_s=time.monotonic() - started,
        finish_reason="stop",
    )


REDACTED = "***"
WITHHELD = "*** (withheld: the answer held the API key in escaped form)"


def _unescaped(text: str) -> str:
    """TEXT with JSON and Python string escapes undone (``\\u0073k-...`` is ``sk-...``), to
    find a key a provider wrote escaped; other characters pass through."""
    raw = text.encode("latin-1", "backslashreplace")
    return codecs.decode(raw, "unicode_escape", "ignore")


def _redact(value: Any, key: str) -> Any:
    """VALUE with every occurrence of KEY replaced by :data:`REDACTED` (strings inside
    dicts and lists too, keys of dicts included)."""
    if isinstance(value, str):
        return value.replace(key, REDACTED)
    if isinstance(value, dict):
        return {_redact(k, key): _redact(v, key) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, key) for v in value]
    return value


# --- the pool -------------------------------------------------------------------


class ProviderPool:
    """Rotating, backing-off, thread-safe access to a list of providers.

    ``max_retries`` is the number of attempts after the first one (so a call
    makes at most ``max_retries + 1`` requests). A provider that fails with a
    retryable error cools down for its ``Retry-After`` (capped at
    ``retry_after_max``) or for ``backoff_base * 2**(n-1)`` seconds (capped at
    ``backoff_max``, then jittered to 50-100 %) after its n-th consecutive
    failure, and the pool rotates to the next provider. A call sleeps (via the
    injected ``sleep``) only when every provider is cooling down. ``clock`` and
    ``rng`` can be injected for tests.
    """

    def __init__(
        self,
        providers: Sequence[Provider],
        *,
        max_retries: int = 4,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        retry_after_max: float = 300.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if not providers:
            raise ValueError("ProviderPool needs at least one provider")
        names = [p.name for p in providers]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate provider names: {names}")
        if max_retries < 0 or backoff_base < 0 or backoff_max < 0:
            raise ValueError("max_retries, backoff_base and backoff_max must be >= 0")
        self.providers: tuple[Provider, ...] = tuple(providers)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.retry_after_max = retry_after_max
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._http = _Http()
        self._lock = threading.Lock()
        self._current = 0
        n = len(self.providers)
        self._cooldown_until = [float("-inf")] * n
        self._failures = [0] * n
        self._last_error: list[str | None] = [None] * n

    @classmethod
    def baseline(cls) -> ProviderPool:
        """A pool with only the local rule-based extractor (no network)."""
        return cls([Provider(name=BASELINE, model=rule_extractor.BASELINE_MODEL)], max_retries=0)

    @classmethod
    def from_config(cls, path: str | Path, **kwargs: Any) -> ProviderPool:
        """A pool over the providers of a TOML config file (see :func:`load_providers`)."""
        return cls(load_providers(path), **kwargs)

    def last_errors(self) -> dict[str, str | None]:
        """Each provider's most recent error across all calls (None if none yet)."""
        with self._lock:
            return {p.name: e for p, e in zip(self.providers, self._last_error, strict=True)}

    def _choose(self) -> tuple[int, float]:
        """The provider to try next and how long to wait for it first."""
        with self._lock:
            now = self._clock()
            n = len(self.providers)
            order = [(self._current + k) % n for k in range(n)]
            for i in order:
                if self._cooldown_until[i] <= now:
                    return i, 0.0
            i = min(order, key=lambda j: self._cooldown_until[j])
            return i, self._cooldown_until[i] - now

    def _backoff(self, failures: int) -> float:
        delay = min(self.backoff_max, self.backoff_base * 2 ** max(0, failures - 1))
        return delay * (0.5 + 0.5 * self._rng.random())

    def _failed(self, i: int, error: _Retryable) -> float:
        with self._lock:
            self._failures[i] += 1
            if error.retry_after is not None:
                delay = min(error.retry_after, self.retry_after_max)
            else:
                delay = self._backoff(self._failures[i])
            self._cooldown_until[i] = self._clock() + delay
            self._last_error[i] = str(error)
            if self._current == i:
                self._current = (i + 1) % len(self.providers)
            return delay

    def _succeeded(self, i: int) -> None:
        with self._lock:
            self._failures[i] = 0
            self._cooldown_until[i] = float("-inf")

    def _key(self, provider: Provider) -> str | None:
        if not provider.api_key_env:
            return None
        key = os.environ.get(provider.api_key_env, "").strip()
        if not key:
            raise ProviderFatalError(
                provider.name, f"environment variable ${provider.api_key_env} is not set"
            )
        return key

    def _attempt(self, provider: Provider, messages: Sequence[Mapping[str, str]]) -> Completion:
        if provider.is_baseline:
            return _baseline_complete(provider, messages)
        key = self._key(provider)
        try:
            completion = self._http.post(provider, messages, key)
        except (_Retryable, ProviderFatalError) as exc:
            if key and key in str(exc):  # never leak the key through an echoed body
                exc.args = (_redact(str(exc), key),)
                if isinstance(exc, ProviderError):
                    exc.errors = _redact(exc.errors, key)
            raise
        if not key:
            return completion
        # A provider may echo the key in a 200 answer: it must not reach the database.
        # Written with escapes it would be decoded into a claim: the answer is withheld.
        text = _redact(completion.text, key)
        if key in _unescaped(text):
            text = WITHHELD
        return dataclasses.replace(
            completion, text=text, model=_redact(completion.model, key),
            usage=_redact(completion.usage, key),
            finish_reason=_redact(completion.finish_reason, key))

    def complete(self, messages: Sequence[Mapping[str, str]]) -> Completion:
        """Send chat messages; return the first successful :class:`Completion`.

        Raises :class:`ProviderFatalError` at once on a non-retryable error, and
        :class:`ProviderError` (naming each provider's last error) when all
        ``max_retries + 1`` attempts failed.
        """
        if not messages:
            raise ValueError("no messages")
        errors: dict[str, str] = {}
        for attempt in range(self.max_retries + 1):
            i, wait = self._choose()
            if wait > 0:
                self._sleep(wait)
            provider = self.providers[i]
            try:
                completion = self._attempt(provider, messages)
            except _Retryable as exc:
                errors[provider.name] = str(exc)
                delay = self._failed(i, exc)
                log.warning(
                    "provider %s failed (attempt %d/%d): %s; cooling down %.1fs",
                    provider.name, attempt + 1, self.max_retries + 1, exc, delay,
                )
                continue
            self._succeeded(i)
            return completion
        detail = "; ".join(f"{p.name}: {errors.get(p.name, 'not tried')}" for p in self.providers)
        raise ProviderError(
            f"all {self.max_retries + 1} attempts failed: {detail}",
            {p.name: errors.get(p.name, "not tried") for p in self.providers},
        )
