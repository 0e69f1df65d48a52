"""Server-sent events, decoded incrementally from the bytes as they arrive.

Network reads split events anywhere (inside a line, inside a multi-byte UTF-8 character) and one read can
hold many events; :class:`SSEParser` buffers bytes until a line is complete and hands out each event's
``data`` once the blank line that ends it arrives. Comment lines (``: keep-alive``) and the ``event``,
``id`` and ``retry`` fields are ignored; several ``data:`` lines of one event are joined with ``\\n``;
``\\r\\n`` line ends are accepted (WHATWG HTML, "Server-sent events", "Interpreting an event stream").

One line, and one event's data, may hold at most :data:`MAX_LINE_BYTES`: past it :class:`SSELineTooLong` is raised
and the bytes held are dropped, so a server that streams a line without end (a 50 MB chunk, or bytes that never
reach a newline) costs the client that much memory per stream and no more (before the cap a 50 MB line at
concurrency 4 took the client to 592 MB). aiohttp's own reader stays bounded without help: it stops reading the
socket while more than twice its ``read_bufsize`` waits (``StreamReader.feed_data``'s high-water mark,
https://docs.aiohttp.org/en/latest/_modules/aiohttp/streams.html); the unbounded buffer was this parser's line.
An unfinished line is kept as the list of its pieces and joined once its newline arrives, so a long line costs one
copy, not one per network read.
"""

from __future__ import annotations

# One chunk of an OpenAI-style stream is one step's tokens, a few hundred bytes; the largest a server sends in
# one line is a whole output at once (a server that streams nothing until the end): 16 MiB holds a million-token
# output's text with its token ids. A line past it is no stream this client can time.
MAX_LINE_BYTES = 16 * 1024 * 1024


class SSELineTooLong(Exception):
    """A line (or one event's data) of the stream passed :data:`MAX_LINE_BYTES`: the request fails with this, the
    point goes on."""

    def __init__(self, held_bytes: int, cap_bytes: int) -> None:
        super().__init__(f"an SSE line longer than the client's cap of {cap_bytes:,} bytes "
                         f"({cap_bytes / 2**20:g} MiB): {held_bytes:,} bytes without a line end when the client "
                         "stopped reading; a server's stream chunk is a few hundred bytes")  # fmt: skip
        self.held_bytes = held_bytes
        self.cap_bytes = cap_bytes


class SSEParser:
    """Feed it bytes with :meth:`feed`; it returns the ``data`` payloads of the events completed so far, as bytes
    (UTF-8, as the stream sent them: JSON parsers read bytes, and decoding them first cost a copy per chunk).
    ``max_line_bytes``: the cap on one line and on one event's data (:class:`SSELineTooLong`)."""

    __slots__ = ("_pending", "_pending_bytes", "_data", "max_line_bytes")

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._pending: list[bytes] = []  # the unfinished line, as the pieces it came in
        self._pending_bytes = 0
        self._data: list[bytes] = []
        self.max_line_bytes = max_line_bytes

    def _too_long(self, held: int) -> SSELineTooLong:
        self._pending.clear()
        self._data.clear()
        self._pending_bytes = 0
        return SSELineTooLong(held, self.max_line_bytes)

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes; return the data of every event whose terminating blank line is now in."""
        if not chunk:
            return []
        pending = self._pending
        if pending:  # an unfinished line: held as its pieces until its newline comes, then joined once
            if b"\n" not in chunk:
                pending.append(chunk)
                self._pending_bytes += len(chunk)
                if self._pending_bytes > self.max_line_bytes:
                    raise self._too_long(self._pending_bytes)
                return []
            chunk = pending[0] + chunk if len(pending) == 1 else b"".join(pending) + chunk
            pending.clear()
        lines = chunk.split(b"\n")
        tail = lines.pop()  # the part after the last newline: an unfinished line
        events: list[bytes] = []
        data = self._data
        for line in lines:  # every chunk of every stream passes here: one loop, no call per line
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:  # blank line: dispatch
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
            elif line[:5] == b"data:":
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line == b"data":  # a field name alone: its value is empty
                data.append(b"")
            # comments (": keep-alive") and the event, id and retry fields are ignored
        # Within one feed every line is bounded by what was held (at most the cap) plus one read; across feeds, the
        # unfinished line and an event's data lines waiting for their blank line are what can grow: they are capped.
        if tail:
            pending.append(tail)
            self._pending_bytes = len(tail)
        if data and (held := sum(map(len, data))) > self.max_line_bytes:
            raise self._too_long(held)
        return events

    def flush(self) -> list[bytes]:
        """End of stream: dispatch an event the server did not terminate with a blank line."""
        events = self.feed(b"\n") if self._pending else []
        if self._data:
            events.append(b"\n".join(self._data))
            self._data.clear()
        return events
