"""A live endpoint bench, observe and doctor talk to (`Target`), and bench's check that it serves the spec's model
before a run starts (`check_target`): GET /v1/models within CHECK_TIMEOUT seconds in all, at most
bounded.MAX_BODY bytes, and a model list whose every entry is checked for shape before it is used.
"""

from __future__ import annotations

import http.client
import ssl
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..errors import Problem, SpecError
from .bounded import BodyTooLarge, fetch, json_body


class BenchError(SpecError):
    """The run cannot start (a target that does not answer, a model it does not serve)."""


API_KEY_ENV = "OPENAI_API_KEY"
"""The variable `--api-key` defaults to, as OpenAI clients and `vllm bench serve` read it."""


@dataclass(frozen=True)
class Target:
    """An OpenAI-compatible endpoint: http:// or https:// (certificates verified against the system's CAs, or
    SSL_CERT_FILE), with a path prefix, and the bearer token vLLM's --api-key asks for. The token is never
    part of the URL, the repr or a saved run."""

    url: str
    host: str
    port: int
    base: str
    """Path prefix before /v1 (usually empty)."""
    tls: bool = False
    api_key: str | None = field(default=None, repr=False, compare=False)

    @classmethod
    def parse(cls, url: str, api_key: str | None = None) -> "Target":
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BenchError([Problem("--target", f"'{url}' is not an http:// or https:// URL",
                                      fix="give the vLLM endpoint, e.g. --target http://127.0.0.1:8000")])
        base = parts.path.rstrip("/")
        tls = parts.scheme == "https"
        return cls(f"{parts.scheme}://{parts.netloc}{base}", parts.hostname, parts.port or (443 if tls else 80), base,
                   tls, api_key or None)

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        """A connection to the endpoint (TLS for https://)."""
        if self.tls:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self) -> dict[str, str]:
        """The Authorization header vLLM's --api-key checks, when a key is given."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


CHECK_TIMEOUT = 10.0
"""Seconds bench's check of a target (GET /v1/models) and each read of the stack's counters may take in all, from
connect to the last byte of the answer."""


def served_models(body: bytes) -> list[str]:
    """The model names of an OpenAI model list (`{"data": [{"id": NAME}, ...]}`); ValueError naming what is wrong."""
    listing = json_body(body)
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        raise ValueError("it has no data list")
    for i, m in enumerate(data):
        if not isinstance(m, dict) or not isinstance(m.get("id"), str):
            raise ValueError(f"data[{i}] is not a model with a name (an object whose id is a string)")
    return [m["id"] for m in data]


def check_target(target: Target, model: str, timeout: float = CHECK_TIMEOUT) -> None:
    """Raise BenchError unless `target` answers GET /v1/models (within `timeout` seconds in all, in at most
    bounded.MAX_BODY bytes) and serves `model`."""
    try:
        status, body = fetch(target, "/v1/models", timeout)
    except BodyTooLarge as exc:
        raise BenchError([Problem("--target", f"{target.url}/v1/models is refused: {exc}",
                                  fix="point --target at vLLM's OpenAI-compatible server")]) from None
    except ssl.SSLCertVerificationError as exc:
        raise BenchError([Problem("--target", f"{target.url}'s TLS certificate is not trusted: {exc.verify_message}",
                                  fix="trust the CA that signed it: SSL_CERT_FILE=/path/to/ca.pem kvplan ...")]) from None
    except (OSError, http.client.HTTPException) as exc:
        raise BenchError([Problem("--target", f"{target.url} does not answer: {exc or type(exc).__name__}",
                                  fix="start the stack (kvplan deploy SPEC -i INVENTORY) or point --target at "
                                      "a running vLLM (curl URL/health should print nothing and exit 0)")]) from None
    if status == 401:
        raise BenchError([Problem("--api-key", f"{target.url}/v1/models answered HTTP 401: the server wants an API key"
                                  + (" and refused this one" if target.api_key else ""),
                                  fix=f"pass the key vLLM was started with: --api-key KEY, or set {API_KEY_ENV}")])
    if status != 200:
        raise BenchError([Problem("--target", f"{target.url}/v1/models answered HTTP {status}",
                                  fix="point --target at vLLM's OpenAI-compatible server")])
    try:
        served = served_models(body)
    except ValueError as exc:
        raise BenchError([Problem("--target", f"{target.url}/v1/models is not an OpenAI model list: {exc}",
                                  fix="point --target at vLLM's OpenAI-compatible server")]) from None
    if model not in served:
        names = ", ".join(n[:80] for n in served[:10]) + (f" and {len(served) - 10} more" if len(served) > 10 else "")
        raise BenchError([Problem("--target", f"{target.url} serves {names or 'no model'}, not {model}",
                                  fix="deploy this spec there (vLLM's --served-model-name is the spec's model)")])
