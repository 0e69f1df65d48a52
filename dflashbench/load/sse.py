"""Server-sent events, decoded incrementally from the bytes as they arrive.

Network reads split events anywhere (inside a line, inside a multi-byte UTF-8 character) and one read can
hold many events; :class:`SSEParser` buffers bytes until a line is complete and hands out each event's
``data`` once the blank line that ends it arrives. Comment lines (``: keep-alive``) and the ``event``,
``id`` and ``retry`` fields are ignored; several ``data:`` lines of one event are joined with ``\\n``;
``\\r\\n`` line ends are accepted (WHATWG HTML, "Server-sent events", "Interpreting an event stream").
"""

from __future__ import annotations


class SSEParser:
    """Feed it bytes with :meth:`feed`; it returns the ``data`` payloads of the events completed so far, as bytes
    (UTF-8, as the stream sent them: JSON parsers read bytes, and decoding them first cost a copy per chunk)."""

    __slots__ = ("_buf", "_data")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes; return the data of every event whose terminating blank line is now in."""
        if not chunk:
            return []
        lines = (self._buf + chunk if self._buf else chunk).split(b"\n")
        self._buf = lines.pop()  # the part after the last newline: an unfinished line
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
        return events

    def flush(self) -> list[bytes]:
        """End of stream: dispatch an event the server did not terminate with a blank line."""
        events = self.feed(b"\n") if self._buf else []
        if self._data:
            events.append(b"\n".join(self._data))
            self._data.clear()
        return events
