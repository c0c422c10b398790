"""The judge <-> worker channel (tools/wire.py): what arrives is what was sent, through the pipes
or through the shared memory file, and a hostile header is refused before anything is allocated
or read past the file's end."""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Callable, Iterator

import pytest
import torch
from kforge.tools.evaluate import EvalOptions, evaluate
from kforge.tools.result import Status
from kforge.tools.sandbox import shared_file
from kforge.tools.task import Task
from kforge.tools.wire import DTYPES, Channel, WireError


@pytest.fixture(params=["pipe", "shared"])
def ends(request: pytest.FixtureRequest) -> Iterator[tuple[Channel, Channel]]:
    shared = shared_file() if request.param == "shared" else None
    if request.param == "shared" and shared is None:
        pytest.skip("no memfd on this platform")
    r, w = os.pipe()
    reader, writer = os.fdopen(r, "rb"), os.fdopen(w, "wb")
    yield Channel(None, writer, shared=shared), Channel(reader, None, shared=shared)  # type: ignore[arg-type]
    reader.close()
    writer.close()
    if shared is not None:
        os.close(shared)


def _send_in_thread(sender: Channel, *args: object) -> threading.Thread:
    thread = threading.Thread(target=sender.send, args=args)  # a pipe holds 64 KB: read as it writes
    thread.start()
    return thread


def test_every_dtype_and_nesting_arrives_as_sent(ends: tuple[Channel, Channel]) -> None:
    sender, receiver = ends
    tree = [
        [torch.arange(12).reshape(3, 4).to(dtype) for dtype in DTYPES.values()],
        (torch.tensor(2.5), torch.zeros(0, 3), torch.randn(5, 6).t()),  # 0-d, empty, not contiguous
        7,
        "text",
    ]
    thread = _send_in_thread(sender, "call", {"reuse": True}, tree)
    kind, fields, got = receiver.recv()
    thread.join()
    assert (kind, fields) == ("call", {"reuse": True})
    for want, have in zip(tree[0] + list(tree[1]), got[0] + list(got[1]), strict=True):
        assert have.dtype == want.dtype and have.shape == want.shape and torch.equal(have, want)
    assert isinstance(got[1], tuple) and got[2:] == [7, "text"]


def test_a_large_message_through_the_shared_file_is_a_copy_the_sender_cannot_change() -> None:
    shared = shared_file()
    if shared is None:
        pytest.skip("no memfd on this platform")
    r, w = os.pipe()
    sender = Channel(None, os.fdopen(w, "wb"), shared=shared)  # type: ignore[arg-type]
    receiver = Channel(os.fdopen(r, "rb"), None, shared=shared)  # type: ignore[arg-type]
    x = torch.randn(1 << 22)  # 16 MB: through a pipe this would block without a reader
    sender.send("out", {}, [x])
    (_, _, got) = receiver.recv()
    os.pwrite(shared, b"\xff" * 64, 0)  # the sender scribbles on the file afterwards
    assert torch.equal(got[0], x)


def _header(specs: list[dict[str, object]], shared: bool) -> bytes:
    raw = json.dumps({"kind": "out", "fields": {}, "tree": [{"t": 0}], "tensors": specs, "shared": shared})
    return struct.pack("<Q", len(raw)) + raw.encode()


def test_a_header_naming_more_bytes_than_the_shared_file_holds_is_refused() -> None:
    shared = shared_file()
    if shared is None:
        pytest.skip("no memfd on this platform")
    os.ftruncate(shared, 4096)
    r, w = os.pipe()
    os.write(w, _header([{"dtype": "float32", "shape": [1 << 20]}], shared=True))  # 4 MB named, 4 KB there
    receiver = Channel(os.fdopen(r, "rb"), None, shared=shared)  # type: ignore[arg-type]
    with pytest.raises(WireError, match="in a shared file of 4096"):
        receiver.recv()


def test_a_header_over_the_limit_is_refused_before_any_allocation() -> None:
    r, w = os.pipe()
    os.write(w, _header([{"dtype": "float64", "shape": [1 << 30, 1 << 20]}], shared=False))  # 8 PB
    receiver = Channel(os.fdopen(r, "rb"), None, max_bytes=1 << 30)  # type: ignore[arg-type]
    with pytest.raises(WireError, match="exceeds"):
        receiver.recv()


def test_shared_memory_named_on_a_channel_without_it_is_refused() -> None:
    r, w = os.pipe()
    os.write(w, _header([{"dtype": "float32", "shape": [4]}], shared=True))
    receiver = Channel(os.fdopen(r, "rb"), None)  # type: ignore[arg-type]
    with pytest.raises(WireError, match="without it"):
        receiver.recv()


@pytest.mark.slow
def test_a_message_larger_than_a_worker_may_write_a_file_goes_through(
    monkeypatch: pytest.MonkeyPatch,
    fixture_task: Callable[[str], Task],
    fixture_source: Callable[[str], str],
    make_cpu_options: Callable[..., EvalOptions],
) -> None:
    """Workers may write no file past MAX_FILE_BYTES (RLIMIT_FSIZE, 1 GiB); the shared file is
    sized by the parent, so a message past it (KernelBench's 7 GB inputs: every candidate of
    InstanceNorm failed on the H100 on 2026-11-27 when the sender grew the file) still goes."""
    from kforge.tools import process

    monkeypatch.setattr(process, "MAX_FILE_BYTES", 16 << 20)  # read by the forked child before exec
    result = evaluate(
        fixture_task("large_scale"), fixture_source("candidates/large_scale_torch.py"), make_cpu_options()
    )
    assert result.inputs_mb == pytest.approx(64)
    assert result.status == Status.OK, result.log[-2000:]
