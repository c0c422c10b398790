"""The fp16 GEMM of ``kforge gemm``: the check tells fp32 from fp16 accumulation, the
Triton kernels (tiled, split-K, persistent TMA) pass it (and the fp16-accumulating variant
fails it) under the interpreter, the search puts each family where it can help, and the
shape selection, dispatch table and summary do what the command says."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from kforge.tools.gemm.dispatch import load_table, save_table, table_path
from kforge.tools.gemm.kernels import TOLERANCE, HgemmConfig, hgemm, reference, relative_error
from kforge.tools.gemm.pipeline import GemmInputError, read_shapes
from kforge.tools.gemm.report import summary, table_configs


def _fp16_accumulated(a: torch.Tensor, b: torch.Tensor, block_k: int = 64) -> torch.Tensor:
    """A @ B with an fp16 running sum over K blocks, as a kernel with an fp16 accumulator."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float16)
    for k in range(0, a.shape[1], block_k):
        acc = (acc.float() + a[:, k : k + block_k].float() @ b[k : k + block_k].float()).half()
    return acc


@pytest.mark.parametrize("k", [64, 1024, 4096, 16384])
def test_tolerance_passes_fp32_accumulation_at_every_k_and_fails_fp16_accumulation_at_long_k(k):
    gen = torch.Generator().manual_seed(k)
    a = torch.randn(32, k, generator=gen).half()
    b = torch.randn(k, 32, generator=gen).half()
    ref = reference(a, b)
    assert relative_error((a.float() @ b.float()).half(), ref) <= TOLERANCE
    fp16_err = relative_error(_fp16_accumulated(a, b, block_k=max(64, k // 64)), ref)
    assert fp16_err > TOLERANCE if k >= 1024 else fp16_err <= TOLERANCE  # one K block: no accumulation yet
    nan = (a.float() @ b.float()).half()
    nan[0, 0] = float("nan")
    assert relative_error(nan, ref) == float("inf")


def test_triton_kernel_passes_and_its_fp16_accumulating_variant_is_caught_under_the_interpreter():
    """Odd M, N and K (masked tiles), split-K with the fp32 reduction, the persistent TMA
    schedule (device-built tensor descriptors, with and without warp specialisation, C stored
    whole and in halves), split-K and stream-K on TMA loads, and the
    same tiles with an fp16 accumulator, run by Triton's interpreter (it reads TRITON_INTERPRET
    at import)."""
    code = """
import json, torch
import kforge.tools.gemm.kernels as hgemm_module
from kforge.tools.gemm.kernels import HgemmConfig, hgemm, reference, relative_error, subtile
torch.manual_seed(0)
errs = {}
for m, n, k, split in [(40, 24, 1000, 1), (40, 24, 1000, 2), (16, 48, 32, 1), (32, 16, 768, 3)]:
    a, b = torch.randn(m, k).half(), torch.randn(k, n).half()
    ref = reference(a, b)
    for acc16 in (False, True):
        out = hgemm(a, b, HgemmConfig(16, 16, 32, split_k=split, acc_fp16=acc16))
        assert out.shape == (m, n) and out.dtype == torch.float16
        errs[f"{m}x{n}x{k}-s{split}-{acc16}"] = relative_error(out, ref)
    if split > 1:  # split-K on TMA loads: contiguous K slices, partials summed by the last
        out = hgemm(a, b, HgemmConfig(16, 16, 32, split_k=split, kind="tma"))
        errs[f"{m}x{n}x{k}-tmas{split}-False"] = relative_error(out, ref)
    if split == 1:  # the persistent TMA schedule: 4 programs loop over the tiles, edges zero-filled
        for ws in (False, True):
            out = hgemm(a, b, HgemmConfig(16, 16, 32, group_m=2, kind="tma_ws" if ws else "tma"))
            errs[f"{m}x{n}x{k}-tma{ws}-False"] = relative_error(out, ref)
        hgemm_module.subtile = lambda *tile: True  # C stored in two halves, as 128x256 tiles do
        out = hgemm(a, b, HgemmConfig(16, 16, 32, num_stages=5, kind="tma"))
        hgemm_module.subtile = subtile
        errs[f"{m}x{n}x{k}-tmahalves-False"] = relative_error(out, ref)
# Stream-K over 4 programs: every tile's K blocks spread (6 tiles), a mix of spread tiles and
# whole waves (21 tiles: 5 spread, 16 one a program), each twice (the counters are reset)
for m, n, k in [(40, 24, 1000), (100, 40, 520), (80, 48, 256)]:
    a, b = torch.randn(m, k).half(), torch.randn(k, n).half()
    ref = reference(a, b)
    for call in range(2):
        out = hgemm(a, b, HgemmConfig(16, 16, 32, group_m=2, kind="stream_k"))
        errs[f"{m}x{n}x{k}-streamk{call}-False"] = relative_error(out, ref)
print(json.dumps(errs))
"""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    errs = json.loads(done.stdout.strip().splitlines()[-1])
    for name, err in errs.items():
        if name.endswith("False"):
            assert err <= TOLERANCE, (name, err)
        elif not name.startswith("16x48x32"):  # one K block: too short for the accumulator to show
            assert err > TOLERANCE, (name, err)


def test_config_names_and_the_dispatch_table_round_trip(tmp_path: Path):
    cfg = HgemmConfig(128, 64, 64, 8, 4, 4, 3)
    assert HgemmConfig.from_name(cfg.name) == cfg
    assert HgemmConfig.from_name(HgemmConfig(64, 64, 16, acc_fp16=True).name).acc_fp16
    for ws in (False, True):
        tma = HgemmConfig(128, 256, 64, num_warps=8, kind="tma_ws" if ws else "tma")
        assert HgemmConfig.from_name(tma.name) == tma
    streamk = HgemmConfig(128, 128, 64, num_warps=8, num_stages=4, kind="stream_k")
    assert streamk.name == "128x128x64-g8-s1-w8-p4-streamk" and HgemmConfig.from_name(streamk.name) == streamk
    with pytest.raises(ValueError, match="unknown config flags"):
        HgemmConfig.from_name("64x64x64-g8-s1-w4-p3-fast")
    table = {(512, 64, 16384): cfg, (64, 64, 64): HgemmConfig(64, 64, 64), (8192, 8192, 8192): tma}
    save_table(tmp_path / "t.json", "NVIDIA H100", table)
    assert load_table(tmp_path / "t.json") == table


def test_tables_written_before_the_kind_field_load_as_the_same_configs(tmp_path: Path):
    """Older records gave the kernel family as booleans (tma, warp_spec, stream_k, cuda): each
    loads as its kind, a combination no kernel ran is refused, and so are unknown kinds and
    names with two kinds; the shipped H100 table loads."""
    base = {"block_m": 128, "block_n": 256, "block_k": 64, "group_m": 8, "split_k": 1, "num_warps": 8,
            "num_stages": 3, "acc_fp16": False}  # fmt: skip
    for flags, kind in [
        ({"tma": False, "warp_spec": False}, "triton"),
        ({"tma": True, "warp_spec": False}, "tma"),
        ({"tma": True, "warp_spec": True}, "tma_ws"),
        ({"tma": True, "warp_spec": False, "stream_k": True, "cuda": False}, "stream_k"),
        ({"tma": False, "warp_spec": False, "stream_k": False, "cuda": True}, "cuda"),
    ]:
        cfg = HgemmConfig.from_json({**base, **flags})
        assert cfg.kind == kind and cfg == HgemmConfig.from_json(cfg.to_json())
    with pytest.raises(ValueError, match="no GEMM kernel runs"):
        HgemmConfig.from_json({**base, "tma": True, "cuda": True})
    with pytest.raises(ValueError, match="unknown GEMM kernel kind"):
        HgemmConfig(64, 64, 64, kind="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="more than one kernel kind"):
        HgemmConfig.from_name("64x64x64-g8-s1-w4-p3-tma-cuda")
    old = tmp_path / "old.json"
    old.write_text(
        json.dumps({"gpu": "NVIDIA H100", "shapes": [{"M": 64, "N": 256, "K": 8192, **base, "tma": True}]})
    )
    assert load_table(old) == {(64, 256, 8192): HgemmConfig(128, 256, 64, num_warps=8, kind="tma")}
    shipped = load_table(table_path("NVIDIA H100 80GB HBM3"))
    assert len(shipped) == 63 and {c.kind for c in shipped.values()} == {"triton", "tma", "tma_ws"}


def test_cuda_kernels_compile_for_hopper_without_register_spills(tmp_path: Path):
    """Every CUDA C++ tile config builds for sm_90 with nvcc, and none spills registers (a
    64 x 64 warp tile would: 128 fp32 accumulators a thread)."""
    from kforge.tools.gemm.cuda import CUDA_TILES, kernel_source
    from torch.utils.cpp_extension import CUDA_HOME

    nvcc = shutil.which("nvcc") or (CUDA_HOME and str(Path(CUDA_HOME) / "bin" / "nvcc"))
    if not nvcc or not Path(nvcc).exists():
        pytest.skip("nvcc not installed")
    (tmp_path / "k.cu").write_text(kernel_source())
    cmd = [nvcc, "-arch=sm_90", "-O3", "-cubin", "-Xptxas", "-v", "k.cu", "-o", "k.cubin"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    spills = re.findall(r"(\d+) bytes spill stores", done.stderr)
    assert len(spills) == len(CUDA_TILES) and set(spills) == {"0"}, done.stderr[-3000:]


def test_cuda_configs_name_their_kernel():
    from kforge.tools.gemm.cuda import CUDA_TILES, tile_index

    for i, (bm, bn, bk, wm, wn, stages) in enumerate(CUDA_TILES):
        cfg = HgemmConfig(bm, bn, bk, 8, 2, wm * wn, stages, kind="cuda")
        assert HgemmConfig.from_name(cfg.name) == cfg and cfg.name.endswith("-cuda")
        assert tile_index(bm, bn, bk, wm * wn, stages) == i
    with pytest.raises(ValueError, match="no CUDA C\\+\\+ kernel for 128x128x64"):
        tile_index(128, 128, 64, 8, 4)
    with pytest.raises(ValueError, match="runs on a CUDA GPU"):  # CPU tensors
        hgemm(
            torch.ones(32, 64).half(),
            torch.ones(64, 64).half(),
            HgemmConfig(32, 64, 64, 8, 1, 2, 4, kind="cuda"),
        )


def test_search_families_go_where_they_can_help():
    """16/32-row tiles only where 64-row tiles leave SMs idle, the persistent TMA schedule only
    where the output tiles fill half the SMs and rows are 16-byte aligned (TMA split-K below
    that), split-K below a wave;
    with a prior winner the 64+-row tile family is that config alone."""
    from kforge.tools.gemm.search import candidates, family

    def families(m: int, n: int, k: int, **kw) -> set[str]:
        return {family(c) for c in candidates(m, n, k, 132, **kw)}

    assert families(512, 64, 16384) == {
        "tile",
        "small-m",
        "tma",
        "cuda",
    }  # TMA: split-K only, below half a wave
    middle = [c for c in candidates(2048, 256, 8192, 132) if c.uses_tma]
    assert middle and all(
        c.split_k > 1 or c.kind == "stream_k" for c in middle
    )  # never the persistent kernel
    assert families(8192, 8192, 16384) == {"tile", "tma", "cuda"}
    assert families(8192, 8190, 4096) == {"tile"}  # the CUDA C++ kernel reads 16-byte chunks too
    # stream-K where the last wave is part-empty: 12288x256 in 128x256 tiles is 96 tiles on 132 SMs
    streamk = [c for c in candidates(12288, 256, 8192, 132) if c.kind == "stream_k"]
    assert (128, 256) in {(c.block_m, c.block_n) for c in streamk}
    assert not any(c.kind == "stream_k" for c in candidates(8192, 8192, 8192, 132))  # 15.5 waves: 97% full
    assert families(8192, 8192, 16383) == {"tile"}
    assert not any(c.kind == "cuda" and c.block_m < 64 for c in candidates(8192, 8192, 16384, 132))
    skinny = candidates(512, 64, 16384, 132)
    assert any(c.block_m == 16 and c.split_k > 1 for c in skinny)
    assert all(c.split_k == 1 for c in candidates(8192, 8192, 16384, 132))
    assert all(c.uses_tma for c in candidates(8192, 8192, 16384, 132, families=("tma",)))
    assert any(c.kind == "cuda" and c.split_k == 8 for c in skinny)


def test_shape_selection_is_every_nth_by_problem_size(tmp_path: Path):
    path = tmp_path / "shapes.csv"
    path.write_text("M,N,K\n" + "".join(f"{m},{m},64\n" for m in (512, 64, 256, 128, 1024, 2048)))
    assert read_shapes(path, every=2, offset=1) == [(128, 128, 64), (512, 512, 64), (2048, 2048, 64)]
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(GemmInputError, match="columns M, N, K"):
        read_shapes(tmp_path / "bad.csv", 1, 0)
    with pytest.raises(GemmInputError, match="no such shapes CSV"):
        read_shapes(tmp_path / "missing.csv", 1, 0)


def test_each_gpu_worker_takes_every_nth_shape_and_a_failed_one_fails_the_run(tmp_path: Path, monkeypatch):
    """Two GPUs with --every 2 --offset 1: the workers take every 4th shape from 1 and from 3,
    through ``python -m kforge.tools.gemm.pipeline``; a worker that fails names its GPU."""
    from kforge.tools.gemm import pipeline

    shapes_csv = tmp_path / "shapes.csv"
    shapes_csv.write_text("M,N,K\n" + "".join(f"{m},{m},64\n" for m in range(16, 16 * 11, 16)))
    started: list[list[str]] = []

    class Worker:
        exit_code = 0

        def __init__(self, cmd: list[str]):
            started.append(cmd)

        def wait(self) -> int:
            return self.exit_code

    monkeypatch.setattr(pipeline.subprocess, "Popen", Worker)
    pipeline.spawn_workers(shapes_csv, [1, 3], tmp_path, 2, 1, 30, tmp_path / "prior.csv")
    assert [cmd[1:3] for cmd in started] == [["-m", "kforge.tools.gemm.pipeline"]] * 2
    assert [cmd[3:] for cmd in started] == [
        [str(shapes_csv), gpu, str(tmp_path), "4", first, "30", str(tmp_path / "prior.csv")]
        for gpu, first in (("1", "1"), ("3", "3"))
    ]
    ran: list[tuple] = []
    monkeypatch.setattr(pipeline, "run_worker", lambda *args: ran.append(args))
    pipeline.main(started[1][3:])
    assert ran == [(read_shapes(shapes_csv, 1, 0)[3::4], 3, tmp_path, 30, tmp_path / "prior.csv")]
    Worker.exit_code = 1
    with pytest.raises(GemmInputError, match=r"GPU\(s\) \[1, 3\] failed; rerun with --resume"):
        pipeline.spawn_workers(shapes_csv, [1, 3], tmp_path, 2, 1, 30, None)


def test_table_keeps_only_shapes_where_the_kernel_won_and_summary_gives_geomeans():
    def row(m: int, kforge: float, torch_ms: float) -> dict[str, str]:
        times = {"kforge_ms": kforge, "torch_ms": torch_ms, "cublaslt_ms": torch_ms}
        server = {"kforge_server_ms": kforge, "torch_server_ms": torch_ms, "cublaslt_server_ms": torch_ms}
        return {"M": str(m), "N": "64", "K": "64", "config": HgemmConfig(64, 64, 64).name, **{
            k: str(v) for k, v in {**times, **server}.items()}}  # fmt: skip

    rows = [row(64, 1.0, 2.0), row(128, 2.0, 1.0)]
    assert list(table_configs(rows)) == [(64, 64, 64)]
    line = summary(rows)
    assert "2 shapes" in line and "1.000x offline" in line and "faster on 1" in line
    assert "dispatched (torch.matmul where the kernel lost) 1.414x" in line
    assert "best algorithm" not in line  # a run from before the cuBLASLt sweep
    assert "geomean - offline" in summary([])  # no rows: no mean, said as such
    for r in rows:
        r.update(lt_best_ms=r["kforge_ms"], lt_best_server_ms=str(2 * float(r["kforge_server_ms"])))
    assert "vs cuBLASLt's best algorithm 1.000x offline, 2.000x server" in summary(rows)


@pytest.mark.gpu
def test_kernel_and_dispatch_match_torch_on_the_gpu():
    import kforge.tools.gemm.dispatch as dispatch
    import kforge.tools.gemm.kernels as hg
    from kforge import gemm

    for m, n, k, cfg in [
        (512, 64, 16384, HgemmConfig(64, 64, 128, split_k=8)),
        (256, 384, 1000, HgemmConfig(128, 128, 64)),
    ]:
        a, b = torch.randn(m, k, device="cuda").half(), torch.randn(k, n, device="cuda").half()
        ref = reference(a, b)
        assert relative_error(hg.hgemm(a, b, cfg), ref) <= TOLERANCE
        assert relative_error(hg.hgemm(a, b, cfg), ref) <= TOLERANCE  # the cached launch
        assert relative_error(gemm.matmul(a, b), ref) <= TOLERANCE
        key = (a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype, 0, 0)
        table = dispatch._table_for(a.get_device())
        table[(m, n, k)] = cfg  # the dispatcher's table in this process
        try:
            dispatch._DISPATCH.clear()
            assert relative_error(gemm.matmul(a, b), ref) <= TOLERANCE
            assert relative_error(gemm.matmul(a, b), ref) <= TOLERANCE  # the remembered launch
            assert dispatch._DISPATCH[key] is not None
        finally:
            del table[(m, n, k)]
            dispatch._DISPATCH.clear()


@pytest.mark.gpu
def test_cublaslt_algorithms_compute_the_product_and_the_tma_kernel_matches():
    from kforge.tools.gemm.cublaslt import LtGemm
    from kforge.tools.gemm.kernels import hgemm

    m, n, k = 384, 256, 1024
    a, b = torch.randn(m, k, device="cuda").half(), torch.randn(k, n, device="cuda").half()
    ref = reference(a, b)
    torch.matmul(a, b)  # torch loads libcublasLt
    lt = LtGemm(m, n, k, a.device)
    assert lt.algos
    for i in range(len(lt.algos)):
        out = torch.empty(m, n, device="cuda", dtype=torch.float16)
        assert relative_error(lt.run(i, a, b, out), ref) <= TOLERANCE
    lt.close()
    a2, b2 = torch.randn_like(a), torch.randn_like(b)
    ref2 = reference(a2, b2)
    for cfg in (
        HgemmConfig(128, 128, 64, num_warps=8, num_stages=4, kind="tma"),
        HgemmConfig(32, 64, 128, split_k=4),
        HgemmConfig(128, 128, 64, split_k=4, num_stages=4, kind="tma"),
        # stream-K: 6 tiles' 96 K blocks over 132 programs, up to 16 parts a tile
        HgemmConfig(128, 128, 64, num_warps=8, num_stages=4, kind="stream_k"),
    ):
        assert relative_error(hgemm(a, b, cfg), ref) <= TOLERANCE, cfg.name
        # the second call: the compiled launch, the split-K workspace and counters reused
        assert relative_error(hgemm(a2, b2, cfg), ref2) <= TOLERANCE, cfg.name


@pytest.mark.gpu
def test_stream_k_sums_every_part_of_every_tile_on_the_gpu():
    """Stream-K with every tile spread over the SMs (96 tiles on 132 SMs) and with spread
    tiles before whole waves (512 tiles: 248 spread, 264 one a program), five calls each on
    fresh inputs: a part summed twice or lost, or a counter left set, fails the check."""
    from kforge.tools.gemm.kernels import hgemm

    for m, n, k in [(12288, 256, 1024), (4096, 4096, 512), (1000, 520, 4104)]:
        cfg = HgemmConfig(128, 256 if n >= 256 else 128, 64, num_warps=8, num_stages=3, kind="stream_k")
        for _ in range(5):
            a, b = torch.randn(m, k, device="cuda").half(), torch.randn(k, n, device="cuda").half()
            assert relative_error(hgemm(a, b, cfg), reference(a, b)) <= TOLERANCE, (m, n, k)


@pytest.mark.gpu
def test_cuda_kernels_match_the_reference_on_ragged_shapes():
    """Every CUDA C++ tile config on M, N and K that are not tile multiples (rows past M and
    chunks past N and K zero-filled), with and without split-K, twice (the split-K counters
    are reset); unaligned operands are refused, and the dispatcher sends them to torch.matmul."""
    import kforge.tools.gemm.dispatch as dispatch
    import kforge.tools.gemm.kernels as hg
    from kforge.tools.gemm.cuda import CUDA_TILES

    for bm, bn, bk, wm, wn, stages in CUDA_TILES:
        m, n, k = 3 * bm + 5, bn + 8, 5 * bk + 8
        a, b = torch.randn(m, k, device="cuda").half(), torch.randn(k, n, device="cuda").half()
        ref = reference(a, b)
        for split in (1, 3):
            cfg = HgemmConfig(bm, bn, bk, 8, split, wm * wn, stages, kind="cuda")
            for _ in range(2):
                assert relative_error(hg.hgemm(a, b, cfg), ref) <= TOLERANCE, cfg.name
    cfg = HgemmConfig(64, 64, 64, 8, 1, 4, 3, kind="cuda")
    a, b = torch.randn(64, 136, device="cuda").half(), torch.randn(128, 64, device="cuda").half()
    with pytest.raises(ValueError, match="16-byte aligned"):
        hg.hgemm(a[:, 1:129], b, cfg)
    table = dispatch._table_for(0)
    table[(64, 64, 128)] = cfg
    try:
        dispatch._DISPATCH.clear()
        out = dispatch.matmul(a[:, 1:129], b)  # unaligned: torch.matmul
        assert relative_error(out, reference(a[:, 1:129], b)) <= TOLERANCE
        aligned = a[:, :128].contiguous()
        assert relative_error(dispatch.matmul(aligned, b), reference(aligned, b)) <= TOLERANCE
    finally:
        del table[(64, 64, 128)]
        dispatch._DISPATCH.clear()


def test_a_tuned_shape_is_a_task_the_evaluator_checks_like_any_other(tmp_path: Path, make_cpu_options):
    """The written task and candidate go through kforge's evaluator (fp16 class) on the CPU,
    the Triton kernel under the interpreter; the candidate's error is the fp32-accumulation one."""
    from kforge.tools.evaluate import evaluate_many
    from kforge.tools.gemm.tasks import write_tasks
    from kforge.tools.result import Status
    from kforge.tools.task import load_task

    (task,) = write_tasks({(32, 16, 64): HgemmConfig(16, 16, 32, split_k=2)}, tmp_path)
    candidate = (tmp_path / "gemm_32x16x64_kforge.py").read_text()
    (result,) = evaluate_many(load_task(task), [candidate], make_cpu_options(precision="fp16", trials=2))
    assert result.status == Status.OK and result.correct, result.log
    assert result.fp64_rel_err is not None and result.fp64_rel_err <= TOLERANCE


def test_a_known_shape_launches_its_compiled_kernel_straight(monkeypatch):
    """After a shape's first call, the same config, shapes and strides with aligned fp16
    operands on the plan's device go straight to the compiled launch, with the plan's
    split-K workspace and counters (kept between calls) and a new C each call; any other
    call (another dtype, an unaligned view) takes the checked path. The compiled kernel is
    a recorder here: on the CPU the interpreter runs kernels and there is none."""
    import kforge.tools.gemm.kernels as hg

    launches: list[tuple] = []

    class Compiled:
        function, packed_metadata = "function", "metadata"

        def run(self, *args):
            launches.append(args)

    def compile_to_recorder(plan, cfg, tensors):
        plan.kernel = Compiled()

    monkeypatch.setattr(hg, "_compile", compile_to_recorder)
    monkeypatch.setattr(hg, "_PLANS", {})
    monkeypatch.setattr(hg, "_LAUNCHES", {})
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    cfg = hg.HgemmConfig(16, 16, 32, split_k=2)
    a, b = torch.randn(32, 64).half(), torch.randn(64, 16).half()
    first, second = hg.hgemm(a, b, cfg), hg.hgemm(a, b, cfg)
    assert len(launches) == 2 and len(hg._PLANS) == 1 and len(hg._LAUNCHES) == 1
    (plan,) = hg._PLANS.values()
    grid_and_stream = (plan.grid[0], plan.grid[1], 1, 7, "function", "metadata", None, None, None)
    assert launches[1][:9] == grid_and_stream
    got_a, got_b, got_c, got_ws, got_locks, *scalars = launches[1][9:]
    assert got_a is a and got_b is b and got_c is second and got_c is not first
    assert got_ws is plan.ws is launches[0][12] and got_ws.shape == (2, 32, 16) and got_locks is plan.locks
    assert tuple(scalars) == plan.scalars and second.shape == (32, 16) and second.dtype == torch.float16
    with pytest.raises(ValueError, match="float16"):
        hg.hgemm(a.float(), b.float(), cfg)
    unaligned = torch.randn(32 * 64 + 1).half()[1:].view(32, 64)
    hg.hgemm(unaligned, b, cfg)
    assert len(hg._PLANS) == 2 and len(hg._LAUNCHES) == 1 and len(launches) == 3
    assert launches[2][9] is unaligned


def test_a_triton_3_6_launcher_is_called_bare_with_its_scratch_allocated_once(monkeypatch):
    """Triton 3.6's launcher allocates the kernel's global scratch (the TMA descriptors)
    on every call; the plan's launch calls its C entry point with one scratch buffer,
    allocated once, and the same grid, flags and arguments. A launcher of another shape
    is called as it is (the test above)."""
    import kforge.tools.gemm.kernels as hg
    from triton.runtime import _allocation

    calls: list[tuple] = []
    allocations: list[tuple] = []

    class CudaLauncher:  # the attributes and call signature of Triton 3.6's
        global_scratch_size, global_scratch_align, profile_scratch_size, num_ctas = 128, 128, 0, 1
        launch_cooperative_grid, launch_pdl = False, True

        def __init__(self):
            self.launch = lambda *args: calls.append(args)

        def __call__(self, gridX, gridY, gridZ, stream, function, *args):
            raise AssertionError("the Python wrapper allocates scratch on every call")

    class Compiled:
        function, packed_metadata, run = "function", "metadata", CudaLauncher()

    def allocator(size, align, stream):
        allocations.append((size, align))
        return torch.empty(size, dtype=torch.int8)

    monkeypatch.setattr(hg, "_compile", lambda plan, cfg, tensors: setattr(plan, "kernel", Compiled()))
    monkeypatch.setattr(hg, "_PLANS", {})
    monkeypatch.setattr(hg, "_LAUNCHES", {})
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(_allocation, "_allocator", type("Var", (), {"get": staticmethod(lambda: allocator)}))
    cfg = hg.HgemmConfig(16, 16, 32)
    a, b = torch.randn(48, 64).half(), torch.randn(64, 32).half()
    first, second = hg.hgemm(a, b, cfg), hg.hgemm(a, b, cfg)
    (plan,) = hg._PLANS.values()
    assert plan.grid == (6, 1) and allocations == [(6 * 128, 128)] and len(calls) == 2
    head = (6, 1, 1, 7, "function", False, True)
    assert calls[0][:7] == calls[1][:7] == head and calls[0][7] is calls[1][7]
    assert calls[0][7].numel() == 6 * 128 and calls[1][8:13] == (None, "metadata", None, None, None)
    got_a, got_b, got_c, *rest = calls[1][13:]
    assert got_a is a and got_b is b and got_c is second and got_c is not first
    assert second.shape == (48, 32) and second.is_contiguous() and tuple(rest) == (*plan.extra, *plan.scalars)


def test_the_dispatcher_remembers_each_operand_layout(monkeypatch):
    """kforge.gemm.matmul: a layout seen before goes to its remembered launch when the
    operands are 16-byte aligned, or to torch.matmul when it is not the table's; an unaligned
    view of a known layout takes the checked path, and the memory stays bounded."""
    import kforge.tools.gemm.dispatch as dispatch

    monkeypatch.setattr(dispatch, "_DISPATCH", {})
    a, b = torch.randn(32, 64).half(), torch.randn(64, 16).half()
    key = (a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype, -1, -1)
    assert torch.equal(dispatch.matmul(a, b), torch.matmul(a, b)) and dispatch._DISPATCH == {
        key: None
    }  # CPU: torch
    launched: list[tuple] = []

    def tuned(x, y):
        launched.append((x, y))
        return "tuned"

    dispatch._DISPATCH[key] = tuned
    assert dispatch.matmul(a, b) == "tuned" and launched == [(a, b)]
    unaligned = torch.randn(32 * 64 + 1).half()[1:].view(32, 64)
    assert torch.equal(dispatch.matmul(unaligned, b), torch.matmul(unaligned, b)) and len(launched) == 1
    monkeypatch.setattr(dispatch, "_DISPATCH_MAX", 2)
    dispatch.matmul(a.float(), b.float())
    assert len(dispatch._DISPATCH) == 2
    dispatch.matmul(a.double(), b.double())
    assert len(dispatch._DISPATCH) == 1
