"""An already-running OpenAI-compatible server: dflashbench launches nothing and stops nothing.

Its acceptance counters are read the way the engine behind it exposes them, chosen by a *flavour* (the
name of an engine backend: ``vllm``, ``sglang``, ``trtllm``, ``reference``); the flavour's own backend does
the reading (one parser per engine, in :mod:`dflashbench.backends.counters`). Without a flavour
(``None`` / ``"openai"``) no counters are read: tau is then 1.0 for AR and unknown otherwise.

The probes at the end (``/v1/models``: is it up, what does it serve) are how a sweep checks any server before
and after a point, launched or not.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import PurePosixPath

import aiohttp

from dflashbench.backends.base import LaunchPlan, ServerSpec
from dflashbench.errors import UserError
from dflashbench.load.endpoints import auth_headers
from dflashbench.types import AcceptCounters

NO_FLAVOUR = (None, "", "none", "openai", "endpoint")


class EndpointBackend:
    """A server someone else runs, at a URL given with ``--endpoint``."""

    name = "endpoint"

    def __init__(self, flavour: str | None = None) -> None:
        self.flavour = None if flavour in NO_FLAVOUR else flavour
        self._inner = None
        if self.flavour is not None:
            from dflashbench.backends import get_backend

            self._inner = get_backend(self.flavour)

    def launch_plan(self, spec: ServerSpec) -> LaunchPlan:
        raise UserError("the endpoint backend benchmarks a server that is already running; it launches nothing")

    def concurrency_cap(self, spec: ServerSpec) -> int | None:
        """Unknown: someone else started the server with their own settings."""
        return None

    def health_path(self) -> str:
        """``/v1/models``: every OpenAI-compatible server answers it (``/health`` is not universal)."""
        return "/v1/models"

    async def read_counters(self, session, base_url: str) -> AcceptCounters | None:
        if self._inner is None:
            return None
        return await self._inner.read_counters(session, base_url)

    async def read_server_timing(self, session, base_url: str):
        """The flavour's server-side latency histograms where it reads any (vLLM, SGLang), else ``None``."""
        read = getattr(self._inner, "read_server_timing", None)
        return await read(session, base_url) if read is not None else None

    async def reset_cache(self, session, base_url: str) -> None:
        """The flavour's cache reset where the server allows it; a server that refuses it is left as is."""
        if self._inner is None:
            return
        try:
            await self._inner.reset_cache(session, base_url)
        except Exception:  # noqa: BLE001 - someone else's server: its admin endpoints may be off
            return


# -- probing a server outside the load loop ---------------------------------------------------------------------
ENDPOINT_CHECK_TIMEOUT_S = 10.0


async def _served_models(base_url: str, api_key: str | None, timeout_s: float = ENDPOINT_CHECK_TIMEOUT_S) -> list[str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        async with session.get(base_url.rstrip("/") + "/v1/models", headers=auth_headers(api_key, base_url)) as resp:
            if resp.status != 200:
                raise UserError(f"{base_url}/v1/models answered HTTP {resp.status}")
            text = await resp.text(errors="replace")
    return model_ids(text, f"{base_url}/v1/models")


def model_ids(text: str, where: str) -> list[str]:
    """The model ids of a ``/v1/models`` answer (``{"object": "list", "data": [{"id": ...}]}``; a bare list of
    model objects is read too); a :class:`UserError` saying what came instead when it is neither."""
    try:
        body = json.loads(text)
    except ValueError:
        raise UserError(f"{where} answered {text[:80]!r}, which is not JSON; expected an OpenAI model list "
                        '{"data": [{"id": ...}]}') from None  # fmt: skip
    models = body.get("data") if isinstance(body, dict) else body
    if not isinstance(models, list):
        raise UserError(f"{where} answered a JSON {type(body).__name__} without a \"data\" list; expected an OpenAI "
                        'model list {"data": [{"id": ...}]}')  # fmt: skip
    return [str(m["id"]) for m in models if isinstance(m, dict) and m.get("id")]


def served_context_tokens(base_url: str, api_key: str | None, model: str) -> int | None:
    """The context length the running server says it serves ``model`` with: ``max_model_len`` on its ``/v1/models``
    card (vLLM's and ``dflashbench serve``'s), the one card's where it serves one model; ``None`` where it says
    nothing, or cannot be asked (whether it is usable is :func:`check_endpoint`'s business, later)."""

    async def cards() -> list:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=ENDPOINT_CHECK_TIMEOUT_S)) as session:
            async with session.get(base_url.rstrip("/") + "/v1/models", headers=auth_headers(api_key, base_url)) as resp:
                body = json.loads(await resp.text(errors="replace")) if resp.status == 200 else {}
        found = body.get("data") if isinstance(body, dict) else body
        return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []

    try:
        found = asyncio.run(cards())
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return None
    card = next((c for c in found if c.get("id") == model), found[0] if len(found) == 1 else None)
    value = card.get("max_model_len") if card else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def check_endpoint(base_url: str, api_key: str | None) -> list[str]:
    """The model ids a running server serves; a :class:`UserError` saying so if it cannot be reached."""
    try:
        return asyncio.run(_served_models(base_url, api_key))
    except UserError as exc:
        raise UserError(f"the server at {base_url} is not usable: {exc}") from None
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        if isinstance(exc, TimeoutError):  # it took the connection and said nothing (str(exc) is empty)
            reason = f"no HTTP response within {ENDPOINT_CHECK_TIMEOUT_S:g} s"
        else:
            reason = getattr(exc, "os_error", None) or str(exc) or type(exc).__name__
        raise Unreachable(
            f"cannot reach the server at {base_url} ({reason}); is it running, and is the URL right "
            "(scheme, host, port, no /v1)?"
        ) from None


class Unreachable(UserError):
    """No HTTP answer at all from the server (refused, reset, silent)."""


def answers(base_url: str, api_key: str | None) -> bool:
    """Whether the server is up: it gives an HTTP answer to ``/v1/models`` (an error status or a malformed
    model list is an answer too; what it says is :func:`check_endpoint`'s business)."""
    try:
        check_endpoint(base_url, api_key)
    except Unreachable:
        return False
    except UserError:
        return True
    return True


def pick_model_name(served: Sequence[str], wanted: Sequence[str], where: str, *, named: bool = True,
                    unlisted: bool = False) -> tuple[str, str | None]:
    """The model name requests carry, and a note saying why when it is not the first of ``wanted`` as given.

    ``wanted``: the names the target goes by, the user's first (as typed, then as resolved: ``qwen3-8b``,
    ``Qwen/Qwen3-8B``). ``served``: what the server's ``/v1/models`` lists. The rule:

    - a name the server lists is sent as it is; else the last part of a path or hub id the server lists under
      that (``/models/Qwen3-8B`` or ``Qwen/Qwen3-8B`` served as ``Qwen3-8B``);
    - ``unlisted`` (``--unlisted-model``): the first name is sent although the list lacks it (a router that
      serves more names than it lists);
    - ``named`` False, where nobody chose the target's name for this server (a server dflashbench launched with
      the one target, which the engine names as it likes; an ``--endpoint`` without ``--model`` or a suite):
      the one model the server lists;
    - anything else is a :class:`ModelNotServed` naming what the server serves: never another model in its
      place. A server that lists no model is sent the first name, and a note says so."""
    names = list(dict.fromkeys(n for n in wanted if n))
    first = names[0]
    listed = ", ".join(repr(m) for m in served)
    if not served:
        return first, f"the server at {where} lists no model: requests name it {first!r}"
    for name in names:
        if name in served:
            said = named and name != first  # a launched server lists the target as resolved (a path), as a rule
            return name, f"requests name the model {name!r}, as the server at {where} lists it" if said else None
    if unlisted:
        return first, f"requests name the model {first!r}, which the server at {where} does not list ({listed}): " \
                      "--unlisted-model"  # fmt: skip
    for name in names:
        base = PurePosixPath(name).name
        if base in served:  # said where the user named the model; a launched server names it so as a rule
            return base, f"requests name the model {base!r}: the server at {where} serves {name} under that name" \
                if named else None  # fmt: skip
    if not named and len(served) == 1:
        return served[0], f"requests name the model {served[0]!r}, the one model the server at {where} serves"
    if not named:
        raise ModelNotServed(f"the server at {where} serves {listed}, none of them {first!r}: pass --model with the "
                             "one to measure")  # fmt: skip
    raise ModelNotServed(f"the server at {where} does not serve {first!r}: it serves {listed}; pass --model with one "
                         f"of these names, or add --unlisted-model to send {first!r} all the same (to a router that "
                         "serves more names than it lists)")  # fmt: skip


class ModelNotServed(UserError):
    """The server does not serve the model the run names (and the user did not ask to send it unlisted)."""


def replicas_model(urls: Sequence[str], api_key: str | None, wanted: Sequence[str], *, named: bool = True,
                   unlisted: bool = False) -> tuple[str, list[str]]:
    """The model name to send to every replica in ``urls``, and the notes to print: each replica must answer
    ``/v1/models`` and serve that name (:func:`pick_model_name`); replicas that would be sent different names, or
    one that serves none of them, are an error naming what each serves, before anything is written."""
    served = {url: check_endpoint(url, api_key) for url in urls}
    picks: dict[str, tuple[str, str | None]] = {}
    for url, models in served.items():
        picks[url] = pick_model_name(models, wanted, url if len(urls) == 1 else
                                     f"{url} (replica {list(urls).index(url) + 1} of {len(urls)})",
                                     named=named, unlisted=unlisted)  # fmt: skip
    names = {name for name, _ in picks.values()}
    if len(names) > 1:
        each = "; ".join(f"{u} serves {', '.join(repr(m) for m in ms) or 'nothing'}" for u, ms in served.items())
        raise ModelNotServed(f"the replicas do not serve the same model: {each}; every --endpoint must serve the model "
                             "measured")  # fmt: skip
    name = names.pop()
    return name, list(dict.fromkeys(note for _, note in picks.values() if note))
