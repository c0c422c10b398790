"""The persistent TMA schedule of ``tools/gemm/kernels.py``'s fp16 GEMM, for shapes with half a wave
of output tiles or more (what cuBLAS's nvjet kernels do on Hopper, short of 2-CTA clusters).

One program per SM (grid = min(#SMs, tiles)) walks the output tiles in grouped order, so the
launch pays for one wave of CTA starts and the next tile's loads overlap the last one's
epilogue. Operands come in through tensor descriptors that each program builds on the device
(``tl.make_tensor_descriptor``; 128 bytes each in a per-launch scratch buffer from the Triton
allocator): the bulk-copy engine reads each BLOCK_M x BLOCK_K and BLOCK_K x BLOCK_N tile into
swizzled shared memory, zero-filling past the matrix edge, so no masks or address arithmetic
run in the K loop; C goes out through a descriptor too, which clips at the edge. Host-built
descriptors (``TensorDescriptor``) cost 30 to 60 us of host time a call on the H100 machine,
which showed as GPU time in server mode. ``WARP_SPECIALIZE`` asks Triton to split loads and
MMAs into separate warp groups; ``SUBTILE`` stores C in two halves. TMA needs 16-byte aligned
rows: K and N multiples of 8 and 16-byte aligned base pointers.

Below half a wave of output tiles, the split-K kernel here reads through the same
descriptors: one program per (tile, K slice), the partials summed in the same launch. Where
the last wave of tiles is part-empty (96 tiles on 132 SMs leave 36 idle through the whole K
loop), the stream-K kernel spreads the K blocks of the part-empty waves evenly over the SMs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    # Grouped order: GROUP_M row tiles share the same B column tiles while they sit in L2.
    group_size = GROUP_M * num_pid_n
    first_m = (tile // group_size) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % group_size) % rows, (tile % group_size) // rows


@triton.jit
def _tile_product(
    a_desc, b_desc, pid_m, pid_n, k_first, k_end,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    # One output tile's product over K blocks [k_first, k_end), in fp32.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k_first, k_end):
        a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
        b = b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _hgemm_tma_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, SUBTILE: tl.constexpr,
):  # fmt: skip
    a_desc = tl.make_tensor_descriptor(
        a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K]
    )
    b_desc = tl.make_tensor_descriptor(
        b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N]
    )
    C_N: tl.constexpr = BLOCK_N // 2 if SUBTILE else BLOCK_N
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, C_N])
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    # The epilogue recomputes its tile from its own counter, so the flattened (software
    # pipelined across tiles) loop carries no value from one tile's prologue to its epilogue.
    tile_c = tl.program_id(axis=0) - NUM_SMS
    for tile in tl.range(
        tl.program_id(axis=0), num_tiles, NUM_SMS, flatten=True, warp_specialize=WARP_SPECIALIZE
    ):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):  # reads BLOCK_M x K of A and K x BLOCK_N of B per tile
            a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
            b = b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        tile_c += NUM_SMS
        pid_m, pid_n = _tile_coords(tile_c, num_pid_m, num_pid_n, GROUP_M)
        if SUBTILE:  # two BLOCK_M x BLOCK_N/2 stores: half the epilogue's shared memory
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], left.to(tl.float16))
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], right.to(tl.float16))
        else:
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))


@triton.jit
def _hgemm_tma_split_kernel(
    a_ptr, b_ptr, c_ptr, ws_ptr, lock_ptr, M, N, K, stride_am, stride_bk,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
):  # fmt: skip
    # Split-K on TMA loads, for shapes with fewer output tiles than SMs and a long K: one
    # program per (tile, slice), each slice a contiguous run of K blocks (the bulk-copy engine
    # streams it), its fp32 partial left in the workspace; the slice that arrives last at the
    # tile's counter sums them and stores C once through a descriptor, in the same launch.
    a_desc = tl.make_tensor_descriptor(
        a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K]
    )
    b_desc = tl.make_tensor_descriptor(
        b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N]
    )
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    pid = tl.program_id(axis=0)
    slice_id = tl.program_id(axis=1)
    pid_m, pid_n = _tile_coords(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    k_tiles = tl.cdiv(K, BLOCK_K)
    per_slice = tl.cdiv(k_tiles, SPLIT_K)
    k_first = slice_id * per_slice
    k_end = min(k_first + per_slice, k_tiles)
    acc = _tile_product(a_desc, b_desc, pid_m, pid_n, k_first, k_end, BLOCK_M, BLOCK_N, BLOCK_K)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tile = offs_m[:, None] * N + offs_n[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(ws_ptr + slice_id * M * N + tile, acc, mask=mask)
    tl.debug_barrier()
    arrived = tl.atomic_add(lock_ptr + pid, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT_K - 1:
        for s in range(SPLIT_K):
            if s != slice_id:
                acc += tl.load(ws_ptr + s * M * N + tile, mask=mask, other=0.0, cache_modifier=".cg")
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))
        tl.atomic_xchg(lock_ptr + pid, 0)


@triton.jit
def _hgemm_tma_streamk_kernel(
    a_ptr, b_ptr, c_ptr, ws_ptr, lock_ptr, M, N, K, stride_am, stride_bk, sk_tiles, iters,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
):  # fmt: skip
    # Stream-K (Osama et al., 2023) on TMA loads, for shapes whose output tiles leave the last
    # wave part-empty. The first ``sk_tiles`` tiles' K blocks, laid end to end, are cut into
    # NUM_SMS runs of ``iters`` blocks, one a program: a run covers parts of one to a few
    # tiles. A tile done whole by one run is stored; a part leaves its fp32 partial in one of
    # its program's two workspace slots (0: the tile its run starts in, 1: the one it ends
    # in), and the part that arrives last at the tile's counter sums them and stores C, in
    # the same launch. The remaining tiles (whole waves) are done one a program, persistent.
    a_desc = tl.make_tensor_descriptor(
        a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K]
    )
    b_desc = tl.make_tensor_descriptor(
        b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N]
    )
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    rows, cols = tl.arange(0, BLOCK_M), tl.arange(0, BLOCK_N)
    it = pid * iters
    end = min(it + iters, sk_tiles * k_tiles)
    first_tile = it // k_tiles
    while it < end:
        tile = it // k_tiles
        k_first = it - tile * k_tiles
        k_end = min(k_tiles, k_first + end - it)
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = _tile_product(a_desc, b_desc, pid_m, pid_n, k_first, k_end, BLOCK_M, BLOCK_N, BLOCK_K)
        if k_first == 0 and k_end == k_tiles:
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))
        else:
            slot = 2 * pid + (tile != first_tile).to(tl.int32)
            # offsets built from the slot here, not a whole tile of them kept live (and spilled)
            # through the K loop
            tl.store(ws_ptr + (slot * BLOCK_M + rows)[:, None] * BLOCK_N + cols[None, :], acc)
            tl.debug_barrier()
            q_first = (tile * k_tiles) // iters  # the programs whose runs cover part of this tile
            q_last = ((tile + 1) * k_tiles - 1) // iters
            arrived = tl.atomic_add(lock_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == q_last - q_first:
                for q in range(q_first, q_last + 1):
                    if q != pid:
                        q_slot = 2 * q + ((q * iters) // k_tiles != tile).to(tl.int32)
                        q_rows = (q_slot * BLOCK_M + rows)[:, None] * BLOCK_N
                        acc += tl.load(ws_ptr + q_rows + cols[None, :], cache_modifier=".cg")
                c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))
                tl.atomic_xchg(lock_ptr + tile, 0)
        it += k_end - k_first
    for tile in range(sk_tiles + pid, num_pid_m * num_pid_n, NUM_SMS):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = _tile_product(a_desc, b_desc, pid_m, pid_n, 0, k_tiles, BLOCK_M, BLOCK_N, BLOCK_K)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))


def streamk_split(tiles: int, k_tiles: int, programs: int) -> tuple[int, int]:
    """Stream-K's share of a shape: how many output tiles (the first in grouped order) have
    their K blocks spread evenly over the programs, and the blocks each program gets. With
    a part-empty last wave, that is the last whole wave and the remainder (the paper's
    "two-tile" hybrid, so every program's run spans one to two tiles); below one wave, every
    tile; with whole waves only, none."""
    waves, rest = divmod(tiles, programs)
    sk_tiles = 0 if rest == 0 else tiles if waves == 0 else programs + rest
    return sk_tiles, triton.cdiv(sk_tiles * k_tiles, programs) if sk_tiles else 0


def tma_aligned(*tensors) -> bool:  # type: ignore[no-untyped-def]
    """Whether TMA can read these row-major tensors: 16-byte base and row stride."""
    return all(t.data_ptr() % 16 == 0 and t.stride(1) == 1 and t.stride(0) % 8 == 0 for t in tensors)


def subtile(block_m: int, block_n: int, num_stages: int) -> bool:
    """Store C in two halves where a whole tile's epilogue buffer would not fit beside the
    pipeline's stages (128x256 or 256x128 tiles with 4+ stages)."""
    return block_m * block_n >= 128 * 256 and num_stages >= 4


def tma_grid(m: int, n: int, block_m: int, block_n: int, sms: int) -> int:
    return min(sms, triton.cdiv(m, block_m) * triton.cdiv(n, block_n))


def _scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")


def ensure_allocator() -> None:
    """Give Triton an allocator (torch's caching allocator) for the descriptors' scratch,
    unless the process has set one."""
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(_scratch)


TMA_KERNEL = _hgemm_tma_kernel
TMA_SPLIT_KERNEL = _hgemm_tma_split_kernel
TMA_STREAMK_KERNEL = _hgemm_tma_streamk_kernel
