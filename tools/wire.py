"""The channel between the judge and a candidate worker: messages over a pair of pipes.

A message is a JSON header (length-prefixed) followed by the raw bytes of the tensors it
carries. Nothing is unpickled: a tensor arrives as a dtype from a fixed list, a shape and
exactly that many bytes, so a hostile sender can make the receiver read garbage values
(which then fail verification) but never run code, and never allocate more than the
receiver's ``max_bytes``. Trees of tensors (lists, tuples, scalars) are encoded in the
header with ``{"t": i}`` for the i-th tensor.

Where both ends hold a shared memory file (``shared``: a memfd the parent made for the pair),
the tensors' bytes go through it and only the header through the pipe: the GPU copies straight
into and out of the mapping. Through a pipe, KernelBench's 7 GB inputs took longer than a
worker's time limit (a 64 KB pipe moved 0.2-0.4 GB/s here). The sender writes the bytes, then
the header; the receiver copies them out into its own tensors when the header arrives. A
hostile sender can scribble over the file at any time, which again only makes values garbage,
or shrink it: a header naming more bytes than the file holds is refused, and a file shrunk in
the middle of a copy kills the receiver (SIGBUS), which ends the evaluation without a Result.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import struct
from typing import IO, Any

import torch

DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.complex64,
        torch.complex128,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.bool,
    )
}
MAX_HEADER = 1 << 24  # 16 MiB of JSON is already far more than any honest message


class WireError(RuntimeError):
    """The other side sent something that is not a valid message, or went away."""


def encode(tree: Any, tensors: list[torch.Tensor]) -> Any:
    """``tree`` as JSON-able data; its tensors are appended to ``tensors``."""
    if isinstance(tree, torch.Tensor):
        tensors.append(tree)
        return {"t": len(tensors) - 1}
    if isinstance(tree, tuple):
        return {"tuple": [encode(x, tensors) for x in tree]}
    if isinstance(tree, list):
        return [encode(x, tensors) for x in tree]
    if tree is None or isinstance(tree, bool | int | float | str):
        return tree
    if isinstance(tree, torch.dtype | torch.device | torch.Size):
        return {"repr": str(tree)}
    raise WireError(f"cannot send a {type(tree).__name__} (outputs are tensors, lists, tuples or numbers)")


def decode(data: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(data, dict):
        if "t" in data:
            return tensors[int(data["t"])]
        if "tuple" in data:
            return tuple(decode(x, tensors) for x in data["tuple"])
        if "repr" in data:
            return str(data["repr"])
        raise WireError("unknown tree node in message")
    if isinstance(data, list):
        return [decode(x, tensors) for x in data]
    return data


class Channel:
    """One end of a judge <-> worker conversation: ``send`` on one pipe, ``recv`` on the other;
    tensor bytes through the ``shared`` file descriptor when there is one."""

    def __init__(
        self, reader: IO[bytes], writer: IO[bytes], max_bytes: int = 1 << 40, shared: int | None = None
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.max_bytes = max_bytes
        self.shared = shared

    def send(self, kind: str, fields: dict[str, Any] | None = None, tree: Any = None) -> None:
        tensors: list[torch.Tensor] = []
        header = {"kind": kind, "fields": fields or {}, "tree": encode(tree, tensors)}
        blobs = [t.detach() for t in tensors]
        header["tensors"] = [
            {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)} for t in blobs
        ]
        total = sum(t.numel() * t.element_size() for t in blobs)
        shared = self.shared is not None and total > 0
        header["shared"] = shared
        raw = json.dumps(header).encode()
        try:
            if shared:
                self._write_shared(blobs, total)
            self.writer.write(struct.pack("<Q", len(raw)))
            self.writer.write(raw)
            if not shared:
                for t in blobs:
                    if t.numel():
                        host = t.contiguous().cpu()  # held while the pipe reads its address
                        self.writer.write(_view(host))
            self.writer.flush()
        except (BrokenPipeError, OSError, ValueError) as err:
            raise WireError(f"the other side went away ({type(err).__name__})") from err

    def recv(self, device: torch.device | None = None) -> tuple[str, dict[str, Any], Any]:
        """(kind, fields, tree) of the next message; tensors land on ``device`` (CPU if None)."""
        head = self._read_exact(8)
        (size,) = struct.unpack("<Q", head)
        if size > MAX_HEADER:
            raise WireError(f"message header of {size} bytes")
        try:
            header = json.loads(self._read_exact(size))
            specs = [(DTYPES[s["dtype"]], [int(n) for n in s["shape"]]) for s in header["tensors"]]
            shared = bool(header.get("shared"))
        except (ValueError, KeyError, TypeError) as err:
            raise WireError(f"malformed message header: {type(err).__name__}: {err}") from err
        total = sum(_nbytes(dtype, shape) for dtype, shape in specs)
        if total > self.max_bytes or any(n < 0 for _, shape in specs for n in shape):
            raise WireError(f"message of {total} bytes exceeds the {self.max_bytes} allowed")
        on = device if device is not None else torch.device("cpu")
        if shared and total:
            tensors = self._read_shared(specs, total, on)
        else:
            tensors = []
            for dtype, shape in specs:
                t = torch.empty(shape, dtype=dtype)
                if t.numel():
                    self._read_into(_view(t))
                tensors.append(t.to(on) if on.type != "cpu" else t)
        return str(header["kind"]), dict(header["fields"]), decode(header["tree"], tensors)

    def _write_shared(self, blobs: list[torch.Tensor], total: int) -> None:
        assert self.shared is not None
        # the parent sized the file (sandbox.SHARED_BYTES): a worker may not grow one past 1 GiB
        held = os.fstat(self.shared).st_size
        if held < total:
            raise WireError(f"a message of {total} bytes for a shared file of {held}")
        with mmap.mmap(self.shared, total) as mm:
            buf = torch.frombuffer(mm, dtype=torch.uint8, count=total)
            at = 0
            for t in blobs:
                n = t.numel() * t.element_size()
                if n:
                    buf[at : at + n].copy_(_bytes(t))  # a GPU tensor: straight into the mapping
                at += n
            del buf  # the mapping closes only once no tensor views it

    def _read_shared(
        self, specs: list[tuple[torch.dtype, list[int]]], total: int, device: torch.device
    ) -> list[torch.Tensor]:
        if self.shared is None:
            raise WireError("a message through shared memory on a channel without it")
        held = os.fstat(self.shared).st_size
        if held < total:
            raise WireError(f"a message of {total} bytes in a shared file of {held}")
        tensors = []
        with mmap.mmap(self.shared, total) as mm:
            buf = torch.frombuffer(mm, dtype=torch.uint8, count=total)
            at = 0
            for dtype, shape in specs:
                t = torch.empty(shape, dtype=dtype, device=device)
                n = t.numel() * t.element_size()
                if n:
                    _bytes(t).copy_(buf[at : at + n])  # copied out: the sender may write the file again
                at += n
                tensors.append(t)
            del buf
        return tensors

    def _read_exact(self, n: int) -> bytes:
        data = self.reader.read(n)
        if data is None or len(data) != n:
            raise WireError("the other side went away (end of stream)")
        return data

    def _read_into(self, buffer: memoryview) -> None:
        view, done = buffer.cast("B"), 0
        while done < len(view):
            got = self.reader.readinto(view[done:])  # type: ignore[attr-defined]
            if not got:
                raise WireError("the other side went away (end of stream)")
            done += got


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """The bytes of a tensor as a flat uint8 tensor: a view where t is contiguous (writes reach t)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def _nbytes(dtype: torch.dtype, shape: list[int]) -> int:
    count = 1
    for n in shape:
        count *= n
    return count * torch.empty((), dtype=dtype).element_size()


def _view(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy (bfloat16 has no numpy twin)."""
    size = t.numel() * t.element_size()
    return memoryview((ctypes.c_char * size).from_address(t.data_ptr())).cast("B")
