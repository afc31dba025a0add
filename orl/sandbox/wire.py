"""The wire between the test process and the candidate process: only plain data crosses.

This module runs inside the sandbox (orl/sandbox/stub.py joins it into both in-sandbox
programs), so it uses the standard library only, and only modules that cost nothing to
import; the harness imports it for its tests.

Plain data is None, bool, int, float, str, bytes, bytearray, and lists, tuples, dicts,
sets and frozensets of plain data. A value is encoded as a tag byte and its content:

    N, T, F                       None, True, False
    i <4-byte length> <bytes>     int, two's complement big-endian (no size cap but the frame's)
    f <1-byte length> <ascii>     float as float.hex(): exact, and "inf", "-inf", "nan"
    s / b / B <4-byte length> ... str (UTF-8, lone surrogates kept), bytes, bytearray
    l / t / S / Z <4-byte count>  list, tuple, set, frozenset, then their items
    d <4-byte count>              dict, then key, value, key, value, ...

The sender converts subclasses of these types to the base type's content (a namedtuple
becomes a tuple, a Counter a dict, a str subclass its characters), so a custom __eq__ or
__hash__ never crosses; anything else (a generator, a function, an instance) is refused
with NotPlainData. The receiver rebuilds fresh built-in objects, never with pickle or
eval, checks every length against the bytes left, and refuses unknown tags, trailing
bytes, nesting deeper than MAX_DEPTH and frames longer than its limit (checked on the
4-byte length prefix, before the frame is read).

A message is a dict with str keys (its values any plain data), sent as one frame: a
4-byte big-endian length, then the encoded dict. The test process's verdict to the
harness is one such frame too (orl/sandbox/judge.py), read by its length, never as text.
Generators and other iterators are not plain data here; the candidate process drains
them into a list before it replies (orl/sandbox/candidate.py).
"""

import os
import select
import time

MAX_DEPTH = 100  # nesting of lists, tuples, dicts and sets in one value
_CONTAINERS = {list: b"l", tuple: b"t", set: b"S", frozenset: b"Z"}
_BUILDERS = {b"l": list, b"t": tuple, b"S": set, b"Z": frozenset}


class WireError(Exception):
    """A frame or a value that breaks the protocol."""


class NotPlainData(WireError):
    """A value that may not cross: not plain data, or too deep."""


def _length(count: int) -> bytes:
    return count.to_bytes(4, "big")


def _encode(value, out: bytearray, depth: int, limit: int) -> None:
    if depth > MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH} levels")
    if len(out) > limit:  # checked as it grows: shared sublists can make a small value encode huge
        raise NotPlainData(f"more than the limit of {limit} bytes encoded")
    if value is None:
        out += b"N"
    elif value is True or value is False:
        out += b"T" if value else b"F"
    elif isinstance(value, int):
        number = int.__int__(value)  # the exact int inside a subclass (IntEnum, ...)
        data = number.to_bytes((number + (number < 0)).bit_length() // 8 + 1, "big", signed=True)
        out += b"i" + _length(len(data)) + data
    elif isinstance(value, float):
        text = float.hex(float.__float__(value)).encode("ascii")
        out += b"f" + bytes((len(text),)) + text
    elif isinstance(value, str):
        data = str.__str__(value).encode("utf-8", "surrogatepass")
        out += b"s" + _length(len(data)) + data
    elif isinstance(value, (bytes, bytearray)):
        data = bytes(memoryview(value))
        out += (b"B" if isinstance(value, bytearray) else b"b") + _length(len(data)) + data
    elif isinstance(value, dict):
        items = list(dict.items(value))
        out += b"d" + _length(len(items))
        for key, item in items:
            _encode(key, out, depth + 1, limit)
            _encode(item, out, depth + 1, limit)
    else:
        base = next((kind for kind in _CONTAINERS if isinstance(value, kind)), None)
        if base is None:
            raise NotPlainData(f"a {type(value).__name__} object is not plain data")
        items = list(base.__iter__(value))
        out += _CONTAINERS[base] + _length(len(items))
        for item in items:
            _encode(item, out, depth + 1, limit)


def dumps(value, limit: int = 1 << 62) -> bytes:
    """The encoding of a plain value; NotPlainData for anything else, or past `limit` bytes."""
    out = bytearray()
    _encode(value, out, 0, limit)
    if len(out) > limit:
        raise NotPlainData(f"{len(out)} bytes encoded, more than the limit of {limit}")
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, count: int) -> bytes:
        if count > len(self.data) - self.at:
            raise WireError(f"truncated value: {count} bytes announced, {len(self.data) - self.at} left")
        chunk = self.data[self.at : self.at + count]
        self.at += count
        return chunk

    def count(self) -> int:
        return int.from_bytes(self.take(4), "big")

    def value(self, depth: int):
        if depth > MAX_DEPTH:
            raise WireError(f"value nested deeper than {MAX_DEPTH} levels")
        tag = self.take(1)
        if tag in (b"N", b"T", b"F"):
            return {b"N": None, b"T": True, b"F": False}[tag]
        if tag == b"i":
            return int.from_bytes(self.take(self.count()), "big", signed=True)
        if tag == b"f":
            text = self.take(self.take(1)[0])
            try:
                return float.fromhex(text.decode("ascii"))
            except (UnicodeError, ValueError):
                raise WireError(f"bad float {text[:40]!r}") from None
        if tag == b"s":
            try:
                return self.take(self.count()).decode("utf-8", "surrogatepass")
            except UnicodeError:
                raise WireError("bad UTF-8 in a str") from None
        if tag in (b"b", b"B"):
            data = self.take(self.count())
            return data if tag == b"b" else bytearray(data)
        if tag in _BUILDERS or tag == b"d":
            count = self.count()
            if count > len(self.data) - self.at:  # every item takes a byte at least
                raise WireError(f"truncated value: {count} items announced")
            try:
                if tag == b"d":
                    return {self.value(depth + 1): self.value(depth + 1) for _ in range(count)}
                return _BUILDERS[tag](self.value(depth + 1) for _ in range(count))
            except TypeError as exc:  # an unhashable key or set item
                raise WireError(f"bad {'dict' if tag == b'd' else 'set'}: {exc}") from None
        raise WireError(f"unknown tag {tag!r}")


def loads(data: bytes):
    """The value `data` encodes; WireError for anything dumps() cannot have produced."""
    reader = _Reader(data)
    value = reader.value(0)
    if reader.at != len(data):
        raise WireError(f"{len(data) - reader.at} bytes after the value")
    return value


def send(fd: int, message: dict, limit: int) -> None:
    """Write one frame; NotPlainData when it is not plain data or too large, OSError when the reader is
    gone."""
    payload = dumps(message, limit)
    view = memoryview(_length(len(payload)) + payload)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, count: int, deadline: float | None) -> bytes:
    chunks, missing = [], count
    while missing:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError("no reply in time")
        chunk = os.read(fd, min(missing, 1 << 20))
        if not chunk:
            raise EOFError("end of stream")
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, limit: int, timeout: float | None = None) -> dict | None:
    """The next message; None at the end of the stream. TimeoutError, WireError or EOFError (mid-frame)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        header = _read_exactly(fd, 4, deadline)
    except EOFError:
        return None
    size = int.from_bytes(header, "big")
    if size > limit:
        raise WireError(f"frame of {size} bytes announced, more than the limit of {limit}")
    message = loads(_read_exactly(fd, size, deadline))
    if type(message) is not dict or not all(type(key) is str for key in message):
        raise WireError("a message is a dict with str keys")
    return message
