"""The wire between the test process and the candidate process: only plain data crosses.

This module runs inside the sandbox (orl/sandbox/stub.py joins it into both in-sandbox
programs), so it uses the standard library only; the harness imports it for its tests.

Plain data is None, bool, int, float, str, bytes, bytearray, and lists, tuples, dicts,
sets and frozensets of plain data. A value travels as a JSON tree in which every JSON
object is a tag with exactly one key:

    None, bool, str, list         as themselves
    int                           a JSON integer when |n| < 2**63, else {"int": "<hex digits>"}
                                  (JSON readers refuse very long decimal literals; hex has no cap)
    float                         a JSON number (Python writes the shortest repr that reads back
                                  exactly), or {"float": "nan" | "inf" | "-inf"}
    bytes, bytearray              {"bytes": "<base64>"}, {"bytearray": "<base64>"}
    tuple, set, frozenset         {"tuple": [...]}, {"set": [...]}, {"frozenset": [...]}
    dict                          {"dict": [[key, value], ...]}   (keys need not be strings)

The sender converts subclasses of these types to the base type's content (a namedtuple
becomes a tuple, a Counter a dict, a str subclass its characters), so a custom __eq__ or
__hash__ never crosses; anything else (a generator, a function, an instance) is refused
with NotPlainData. The receiver rebuilds fresh built-in objects from the tree, never with
pickle or eval, and refuses any other shape, nesting deeper than MAX_DEPTH and frames
longer than its limit (checked on the 4-byte length prefix, before the frame is read).

A message is one JSON object (its values may hold trees), sent as a frame: a 4-byte
big-endian length, then that many bytes of ASCII JSON.
"""

import base64
import json
import math
import os
import select
import struct
import time

MAX_DEPTH = 100  # nesting of lists, tuples, dicts and sets in one value
_HEADER = struct.Struct(">I")
_INT_RANGE = 1 << 63


class WireError(Exception):
    """A frame or a value that breaks the protocol."""


class NotPlainData(WireError):
    """A value that may not cross: not plain data, too deep, or too large."""


def to_tree(value, depth: int = 0):
    """The JSON tree of a plain value (see the module docstring); NotPlainData otherwise."""
    if depth > MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH} levels")
    if value is None or value is True or value is False:
        return value
    if isinstance(value, int):
        number = int.__int__(value)  # the exact int inside a subclass (IntEnum, ...)
        return number if -_INT_RANGE < number < _INT_RANGE else {"int": format(number, "x")}
    if isinstance(value, float):
        number = float.__float__(value)
        return number if math.isfinite(number) else {"float": repr(number)}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (bytes, bytearray)):
        tag = "bytearray" if isinstance(value, bytearray) else "bytes"
        return {tag: base64.b64encode(bytes(memoryview(value))).decode("ascii")}
    if isinstance(value, list):
        return [to_tree(item, depth + 1) for item in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"tuple": [to_tree(item, depth + 1) for item in tuple.__iter__(value)]}
    if isinstance(value, dict):
        return {"dict": [[to_tree(k, depth + 1), to_tree(v, depth + 1)] for k, v in dict.items(value)]}
    if isinstance(value, frozenset):
        return {"frozenset": [to_tree(item, depth + 1) for item in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"set": [to_tree(item, depth + 1) for item in set.__iter__(value)]}
    raise NotPlainData(f"a {type(value).__name__} object is not plain data")


def from_tree(node, depth: int = 0):
    """Rebuild a value from its JSON tree; WireError for anything not produced by to_tree."""
    if depth > MAX_DEPTH:
        raise WireError(f"value nested deeper than {MAX_DEPTH} levels")
    kind = type(node)
    if node is None or kind in (bool, int, float, str):
        return node
    if kind is list:
        return [from_tree(item, depth + 1) for item in node]
    if kind is not dict or len(node) != 1:
        raise WireError(f"unexpected JSON {kind.__name__} in a value")
    ((tag, body),) = node.items()
    try:
        if tag == "int" and type(body) is str:
            return int(body, 16)
        if tag == "float" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag in ("bytes", "bytearray") and type(body) is str:
            data = base64.b64decode(body.encode("ascii"), validate=True)
            return data if tag == "bytes" else bytearray(data)
        if type(body) is not list:
            raise WireError(f"tag {tag!r} with a {type(body).__name__} body")
        items = [from_tree(item, depth + 1) for item in body]
        if tag == "tuple":
            return tuple(items)
        if tag == "set":
            return set(items)
        if tag == "frozenset":
            return frozenset(items)
        if tag == "dict" and all(type(pair) is list and len(pair) == 2 for pair in items):
            return dict(items)
    except (TypeError, ValueError, UnicodeError) as exc:  # unhashable keys, bad hex or base64
        raise WireError(f"bad {tag!r} value: {exc}") from None
    raise WireError(f"unknown tag {tag!r}")


def _refuse_constant(name: str):
    raise WireError(f"{name} is not valid JSON")


def pack(message: dict, limit: int) -> bytes:
    """One frame holding `message`; NotPlainData when it would exceed `limit` bytes."""
    payload = json.dumps(message, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
    if len(payload) > limit:
        raise NotPlainData(f"{len(payload)} bytes encoded, more than the limit of {limit}")
    return _HEADER.pack(len(payload)) + payload


def unpack(payload: bytes) -> dict:
    """The message of a frame's payload (a JSON object); WireError for anything else."""
    try:
        message = json.loads(payload.decode("ascii"), parse_constant=_refuse_constant)
    except (UnicodeError, ValueError, RecursionError) as exc:
        raise WireError(f"frame is not JSON: {type(exc).__name__}: {str(exc)[:100]}") from None
    if type(message) is not dict:
        raise WireError("frame is not a JSON object")
    return message


def send(fd: int, message: dict, limit: int) -> None:
    """Write one frame; NotPlainData when too large, OSError when the reader is gone."""
    view = memoryview(pack(message, limit))
    while view:
        view = view[os.write(fd, view):]


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
    """The next message; None at a clean end of stream. TimeoutError, WireError or EOFError (mid-frame)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        header = _read_exactly(fd, _HEADER.size, deadline)
    except EOFError:
        return None
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise WireError(f"frame of {size} bytes announced, more than the limit of {limit}")
    return unpack(_read_exactly(fd, size, deadline))
