"""Why a task's torch.compile answer fails kforge's strict check: eager and torch.compile (each
mode given) against the float64 forward, with the inputs drawn and the weights made as the
verifier makes them, and the verifier's own comparisons (``compare``, ``fp64_agreement``).

    python bench/diag_numerics.py TASK.py [--modes default,max-autotune] [--device cuda] [--seeds 3]

For each seed and mode: the largest error of eager and of compile against float64 and where
compile's is largest (its float64 value and eager's error there), the strict check against
eager's output, and the float64 rules that can still pass it. EfficientViT-B1's stage
(unseen9, H200) had every compile candidate incorrect at 4.4e-3 where the CPU's compile stays
within 7.5e-5 of float64: this says which rule fails, and how far, on the GPU.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch
from common import header, print_table
from kforge.tools.compare import compare, fp64_agreement
from kforge.tools.guards import set_precision_flags
from kforge.tools.precision import get_precision
from kforge.tools.task import import_file
from kforge.tools.trees import flatten
from kforge.tools.verify import _fresh_weights


def _draw(task, device: str, seed: int):
    """The reference as the verifier builds it (from seed 0, every weight then moved off its
    initial value, ``_fresh_weights``) and inputs from ``seed``."""
    with torch.device(device):
        torch.manual_seed(0)
        model = task.Model(*task.get_init_inputs()).to(device)
    _fresh_weights(model, 0)
    with torch.device(device):
        torch.manual_seed(seed)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    return model, inputs


def _worst(out, ref64) -> tuple[float, int, int, float]:
    """(largest abs error over the floating outputs, which output, its flat index there, the
    float64 value there)."""
    worst = (0.0, 0, 0, 0.0)
    for n, (o, r) in enumerate(zip(flatten(out), flatten(ref64), strict=True)):
        if isinstance(o, torch.Tensor) and o.is_floating_point():
            diff = (o.double() - r).abs().flatten()
            i = int(diff.argmax())
            if float(diff[i]) > worst[0]:
                worst = (float(diff[i]), n, i, float(r.flatten()[i]))
    return worst


def _error_at(out, ref64, which: int, index: int) -> float:
    o, r = flatten(out)[which], flatten(ref64)[which]
    return float((o.double() - r).abs().flatten()[index])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task", type=Path)
    parser.add_argument("--modes", default="default")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print(header(" ".join(["python bench/diag_numerics.py", *sys.argv[1:]])), flush=True)
    task, fp32 = import_file(args.task, "diag_task"), get_precision("fp32")
    # strict fp32 as the judge runs it: cuDNN's TF32 is on by default, and with it eager's own
    # convolutions were off float64 by 3.6 on EfficientViT (H200, 2026-11-28's first diagnosis)
    set_precision_flags("fp32")
    print(
        f"precision: fp32, TF32 off (matmul {torch.backends.cuda.matmul.allow_tf32},"
        f" cuDNN {torch.backends.cudnn.allow_tf32})",
        flush=True,
    )
    rows = []
    for mode in args.modes.split(","):
        model, _ = _draw(task, args.device, 1)
        compiled = torch.compile(model, mode=mode)
        for seed in range(1, args.seeds + 1):
            _, inputs = _draw(task, args.device, seed)
            with torch.no_grad():
                eager, got = model(*inputs), compiled(*inputs)
                ref64 = copy.deepcopy(model).double()(
                    *[x.double() if x.is_floating_point() else x for x in inputs]
                )
            e_err, c_err = _worst(eager, ref64), _worst(got, ref64)
            eager_at = _error_at(eager, ref64, c_err[1], c_err[2])
            strict, message, _, _ = compare(got, eager, fp32)
            rule = "" if strict else fp64_agreement(got, eager, ref64, fp32)
            verdict = "passes" if strict else ("passes by float64: " + rule[:40]) if rule else "FAILS"
            rows.append([mode, seed, f"{e_err[0]:.2e}", f"{c_err[0]:.2e}", f"{c_err[3]:.3e}", f"{eager_at:.2e}",
                         verdict, message[:70]])  # fmt: skip
    print_table(
        f"{args.task.stem}: eager and torch.compile against float64 ({args.device})",
        ["mode", "seed", "eager max err", "compile max err", "float64 there", "eager err there", "strict check",
         "message"],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()
