"""What crosses the pipe from a submission's runner to the judge: data, never code.

A message is one frame: 8 bytes of length (big-endian), then that many bytes of JSON. Values
are tagged so that the judge rebuilds exactly what was sent and nothing else: ``{"tensor":
[dtype, shape, base64 bytes]}``, ``{"list": [...]}``, ``{"tuple": [...]}``, ``{"dict": [[key,
value], ...]}``, ``{"object": type name}`` for anything else (the judge sees an empty object of
that name, so a message can say "a NoneType" or "a list" as before); numbers, strings, booleans
and null as themselves. No pickle: decoding runs nothing the runner chose, and every size is
checked against the bytes that came before anything is allocated.
"""

from __future__ import annotations

import base64
import json
import math
import os
import select
import time
from typing import Any, BinaryIO

import torch

MAX_FRAME = 16 * 2**20  # bytes of one answer: far above any check's outputs (under 1 MB)
DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    )
}


class WireError(Exception):
    """A frame that is not a well-formed message (said in the row of the check it answered)."""


def encode(value: Any) -> Any:
    """``value`` as tagged JSON data (see the module docstring)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        name = str(t.dtype).removeprefix("torch.")
        if name not in DTYPES:
            return {"object": f"tensor of {name}"}
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return {"tensor": [name, list(t.shape), base64.b64encode(raw).decode("ascii")]}
    if isinstance(value, dict):
        return {"dict": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, list | tuple):
        return {type(value).__name__: [encode(v) for v in value]}
    return {"object": type(value).__name__}


def decode(data: Any) -> Any:
    """What ``encode`` made, rebuilt; a WireError for anything else."""
    if data is None or isinstance(data, bool | int | float | str):
        return data
    if not isinstance(data, dict) or len(data) != 1:
        raise WireError("a value that is not tagged")
    ((tag, body),) = data.items()
    if tag == "tensor":
        return _tensor(body)
    if tag in ("list", "tuple") and isinstance(body, list):
        items = [decode(v) for v in body]
        return items if tag == "list" else tuple(items)
    if tag == "dict" and isinstance(body, list):
        pairs = [_pair(item) for item in body]
        return {_key(decode(k)): decode(v) for k, v in pairs}
    if tag == "object" and isinstance(body, str):
        name = body if body.isidentifier() and len(body) <= 64 else "object"
        return type(name, (), {})()
    raise WireError(f"an unknown tag {str(tag)[:32]!r}")


def _pair(item: Any) -> tuple[Any, Any]:
    if not isinstance(item, list) or len(item) != 2:
        raise WireError("a dict entry that is not a [key, value] pair")
    return item[0], item[1]


def _key(key: Any) -> Any:
    if not isinstance(key, str | int | float | bool | tuple) and key is not None:
        raise WireError("a dict key that cannot be a key")
    return key


def _tensor(body: Any) -> torch.Tensor:
    """A tensor from [dtype, shape, base64], its size checked against the bytes sent."""
    if not isinstance(body, list) or len(body) != 3:
        raise WireError("a tensor that is not [dtype, shape, data]")
    name, shape, text = body
    if name not in DTYPES or not isinstance(text, str) or not isinstance(shape, list):
        raise WireError("a tensor of an unknown dtype or form")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise WireError("a tensor shape that is not a list of sizes")
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    dtype = DTYPES[name]
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise WireError(f"a tensor of shape {shape} and {len(raw)} bytes")
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)


def write_frame(stream: BinaryIO, value: Any) -> None:
    """``value`` (encoded) as one frame on ``stream``."""
    data = json.dumps(encode(value)).encode("utf-8")
    stream.write(len(data).to_bytes(8, "big") + data)
    stream.flush()


def read_frame(fd: int, timeout: float) -> Any:
    """The next frame on ``fd``, decoded: a TimeoutError when it has not all come within
    ``timeout`` seconds, an EOFError when the writer closed its end first, a WireError when it
    is not a message."""
    deadline = time.monotonic() + timeout
    size = int.from_bytes(_read_exactly(fd, 8, deadline), "big")
    if size > MAX_FRAME:
        raise WireError(f"an answer of {size} bytes (at most {MAX_FRAME})")
    body = _read_exactly(fd, size, deadline)
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise WireError(f"an answer that is not JSON ({type(err).__name__})") from None
    try:
        return decode(data)
    except RecursionError:
        raise WireError("an answer nested too deeply") from None
    except (ValueError, TypeError) as err:
        raise WireError(f"an answer that cannot be read ({err})") from None


def _read_exactly(fd: int, size: int, deadline: float) -> bytes:
    chunks, got = [], 0
    while got < size:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(fd, min(size - got, 2**20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
