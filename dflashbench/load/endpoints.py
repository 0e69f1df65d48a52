"""Several endpoints: data-parallel replicas of one server behind no router (``--endpoint URL`` given more than once).

Requests are spread round-robin over the endpoints by their position in the point's plan (request ``i`` goes to
endpoint ``i mod n``; a multi-turn conversation stays on one endpoint, so its later turns can reuse that
replica's prefix cache), each result is tagged with its endpoint, and the acceptance counters are read from
every endpoint and summed: each replica's window delta is taken on its own (a restart of one is detected on its
own), then the deltas are added. tau = 1 + Σ accepted / Σ drafts is then the pooled acceptance length.

Credentials: a URL's own userinfo (``http://user:pw@host``) is sent as HTTP Basic (aiohttp derives the header
from the URL), so the API key from the environment is not sent to that URL (:func:`auth_headers`): one request
can carry only one ``Authorization`` header, and the URL is the more specific of the two.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

from dflashbench.errors import UserError
from dflashbench.redact import redact_url
from dflashbench.types import AcceptCounters, Request, RequestResult


def normalize(urls: Sequence[str]) -> list[str]:
    """The endpoints as given, without a trailing slash; a repeated URL is an error (it would count twice), and
    so is one without its ``http://`` or ``https://`` (``host:8000`` would be read as a scheme "host")."""
    out = [u.rstrip("/") for u in urls if u and u.strip()]
    for url in out:
        check_url(url)
    dup = [u for u, n in Counter(out).items() if n > 1]
    if dup:
        raise UserError(f"--endpoint {dup[0]} is given twice: list each replica once")
    return out


def check_url(url: str) -> None:
    """A :class:`UserError` naming the problem when ``url`` is not ``http(s)://host[:port]``; the message shows
    no userinfo, whatever the URL's shape (:func:`dflashbench.redact.redact_url`), and no text of the parser's
    own error, which may quote a piece of a password (``Port could not be cast to integer value as 'pa'``)."""
    shown = redact_url(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        why = "an IPv6 host needs both [ and ]" if "IPv6" in str(exc) else "it holds characters a URL cannot hold"
        raise UserError(f"--endpoint {shown}: not a URL ({why}); write http://HOST:PORT") from None
    if "://" not in url:
        raise UserError(f"--endpoint {shown}: the scheme is missing; write http://{shown} (or https://)")
    if "@" in url.partition("://")[2] and "@" not in parts.netloc:
        raise UserError(f"--endpoint {shown}: an '@' comes after the host's end ('/', '?' or '#'): if what comes "
                        "before it is a user name and password, percent-encode their '/', '?' and '#' (as %2F, %3F, "
                        "%23)")  # fmt: skip
    try:
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError:
        raise UserError(f"--endpoint {shown}: not a URL (its port is not a number from 0 to 65535); write "
                        "http://HOST:PORT") from None  # fmt: skip
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise UserError(f"--endpoint {shown}: expected http://HOST:PORT or https://HOST:PORT")


def has_credentials(url: str) -> bool:
    """Whether ``url`` carries userinfo (``user:pw@`` or a token as ``TOKEN@``)."""
    try:
        return urlsplit(url).username is not None
    except ValueError:
        return False


def auth_headers(api_key: str | None, url: str) -> dict[str, str]:
    """The ``Authorization`` header for a request to ``url``: ``Bearer`` with the API key, unless the URL
    carries its own credentials (sent as Basic by aiohttp; it refuses a second Authorization header)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key and not has_credentials(url) else {}


def assign(requests: Sequence[Request], urls: Sequence[str]) -> list[Request]:
    """Each request with ``metadata["endpoint"]`` set round-robin; unchanged with a single endpoint."""
    if len(urls) <= 1:
        return list(requests)
    return [dataclasses.replace(r, metadata={**r.metadata, "endpoint": urls[i % len(urls)]})
            for i, r in enumerate(requests)]  # fmt: skip


async def read_all(read: Callable[[str], Awaitable[AcceptCounters | None]], urls: Sequence[str]
                   ) -> list[AcceptCounters | None]:  # fmt: skip
    """The counters of every endpoint, in order (``read`` turns a base URL into its counters or ``None``)."""
    return [await read(u) for u in urls]


def sum_counters(deltas: Sequence[AcceptCounters | None]) -> AcceptCounters | None:
    """The sum of per-endpoint window deltas; ``None`` when any endpoint's delta is unknown (a partial sum would
    give a tau from some replicas only, presented as all)."""
    if not deltas or any(d is None for d in deltas):
        return None
    width = max(len(d.accepted_per_pos) for d in deltas)
    per_pos = [0] * width
    for d in deltas:
        for i, v in enumerate(d.accepted_per_pos):
            per_pos[i] += v
    return AcceptCounters(drafts=sum(d.drafts for d in deltas), draft_tokens=sum(d.draft_tokens for d in deltas),
                          accepted_tokens=sum(d.accepted_tokens for d in deltas), accepted_per_pos=tuple(per_pos))  # fmt: skip


def requests_per_endpoint(results: Sequence[RequestResult]) -> dict[str, int]:
    """Measured requests each endpoint served (tagged results only)."""
    return dict(sorted(Counter(r.endpoint for r in results if r.endpoint and not r.warmup).items()))
