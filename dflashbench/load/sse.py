"""Server-sent events, decoded incrementally from the bytes as they arrive.

Network reads split events anywhere (inside a line, inside a multi-byte UTF-8 character) and one read can
hold many events; :class:`SSEParser` buffers bytes until a line is complete and hands out each event's
``data`` once the blank line that ends it arrives. Comment lines (``: keep-alive``) and the ``event``,
``id`` and ``retry`` fields are ignored; several ``data:`` lines of one event are joined with ``\\n``;
``\\r\\n`` line ends are accepted (WHATWG HTML, "Server-sent events", "Interpreting an event stream").
"""

from __future__ import annotations


class SSEParser:
    """Feed it bytes with :meth:`feed`; it returns the ``data`` payloads of the events completed so far."""

    __slots__ = ("_buf", "_data")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """Add bytes; return the data of every event whose terminating blank line is now in."""
        if not chunk:
            return []
        lines = (self._buf + chunk).split(b"\n")
        self._buf = lines.pop()  # the part after the last newline: an unfinished line
        events: list[str] = []
        for line in lines:
            self._line(line, events)
        return events

    def flush(self) -> list[str]:
        """End of stream: dispatch an event the server did not terminate with a blank line."""
        events: list[str] = []
        if self._buf:
            line, self._buf = self._buf, b""
            self._line(line, events)
        if self._data:
            events.append("\n".join(self._data))
            self._data = []
        return events

    def _line(self, line: bytes, events: list[str]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:  # blank line: dispatch
            if self._data:
                events.append("\n".join(self._data))
                self._data = []
            return
        if line[:1] == b":":  # comment / keep-alive
            return
        name, colon, value = line.partition(b":")
        if name != b"data":
            return
        if colon and value[:1] == b" ":
            value = value[1:]
        self._data.append(value.decode("utf-8", errors="replace"))
