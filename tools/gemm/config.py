"""One configuration of kforge's fp16 GEMM: tile, grid order, split-K, warps, stages and the
kernel family that runs it, with the printed name (``128x128x64-g8-s1-w8-p4-tma``) that logs,
results CSVs and generated candidates carry, and the JSON rows of the dispatch tables."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_args

# The kernel families: "triton" (``kernels.py``'s tiled kernel, split-K with split_k > 1);
# "tma" (``tma.py``'s persistent kernel, or its split-K kernel with split_k > 1); "tma_ws" (the
# persistent kernel with warp-specialised loads and MMAs); "stream_k" (``tma.py``'s stream-K
# kernel); "cuda" (the CUDA C++ kernel of ``cuda.py``, mma.sync).
Kind = Literal["triton", "tma", "tma_ws", "stream_k", "cuda"]
KINDS: tuple[Kind, ...] = get_args(Kind)
TMA_KINDS: tuple[Kind, ...] = ("tma", "tma_ws", "stream_k")
# The kind's mark in the printed name (none for the plain Triton kernel).
_SUFFIX: dict[Kind, str] = {
    "triton": "",
    "tma": "tma",
    "tma_ws": "tmaws",
    "stream_k": "streamk",
    "cuda": "cuda",
}
_KIND_OF: dict[str, Kind] = {suffix: kind for kind, suffix in _SUFFIX.items() if suffix}


@dataclasses.dataclass(frozen=True)
class HgemmConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    acc_fp16: bool = False  # the wrong kernel the correctness check must reject (Triton's only)
    kind: Kind = "triton"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown GEMM kernel kind {self.kind!r}; one of {', '.join(KINDS)}")

    def __hash__(self) -> int:  # computed once: a known shape's call hashes its config
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def uses_tma(self) -> bool:
        """Runs one of ``tma.py``'s kernels (TMA loads)."""
        return self.kind in TMA_KINDS

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> HgemmConfig:
        """The config of a :meth:`to_json` record, or of an older one that gave the kind as
        booleans (``tma``, ``warp_spec``, ``stream_k``, ``cuda``)."""
        record = dict(record)
        flags = {f: bool(record.pop(f, False)) for f in ("tma", "warp_spec", "stream_k", "cuda")}
        if "kind" not in record:
            record["kind"] = _kind_from_flags(**flags)
        elif any(flags.values()):
            raise ValueError(f"a GEMM config record with both a kind and kind flags: {record}")
        return cls(**record)

    @classmethod
    def from_name(cls, name: str) -> HgemmConfig:
        """The config that :attr:`name` printed."""
        tile, group, split, warps, stages, *flags = name.split("-")
        bm, bn, bk = (int(x) for x in tile.split("x"))
        unknown = set(flags) - {"acc16", *_KIND_OF}
        if unknown:
            raise ValueError(f"{name}: unknown config flags {sorted(unknown)}")
        kinds = [_KIND_OF[f] for f in flags if f in _KIND_OF]
        if len(kinds) > 1:
            raise ValueError(f"{name}: more than one kernel kind ({', '.join(kinds)})")
        return cls(
            bm, bn, bk, int(group[1:]), int(split[1:]), int(warps[1:]), int(stages[1:]),
            acc_fp16="acc16" in flags, kind=kinds[0] if kinds else "triton",
        )  # fmt: skip

    @property
    def name(self) -> str:
        acc = "-acc16" if self.acc_fp16 else ""
        kind = f"-{_SUFFIX[self.kind]}" if _SUFFIX[self.kind] else ""
        return (
            f"{self.block_m}x{self.block_n}x{self.block_k}-g{self.group_m}-s{self.split_k}"
            f"-w{self.num_warps}-p{self.num_stages}{acc}{kind}"
        )


def _kind_from_flags(tma: bool, warp_spec: bool, stream_k: bool, cuda: bool) -> Kind:
    """The kind an old record's booleans named; a combination no kernel ran is an error."""
    if (tma and cuda) or (stream_k and (warp_spec or not tma)):
        raise ValueError(
            f"no GEMM kernel runs tma={tma} warp_spec={warp_spec} stream_k={stream_k} cuda={cuda}"
        )
    if cuda:
        return "cuda"
    if stream_k:
        return "stream_k"
    if tma:
        return "tma_ws" if warp_spec else "tma"
    return "triton"  # warp_spec without tma: ignored, as the kernels did
