"""GRPO throughput with rewards from the evaluation engine: steps/s, evaluations/s, peak GPU memory.

No weights can be downloaded on the device, so the policy is a random-initialised Llama
(``--hidden``, ``--layers``) with a BPE tokenizer trained on the prompts and answers below. A
random model writes nothing that parses, so it is first fully fine-tuned (SFT, ``--warmup-steps``)
on the reference Triton candidates of ``examples/`` for the chosen tasks, each under the coder
prompt kforge would send for it; GRPO (LoRA) then samples answers that the engine compiles,
verifies and times on the GPU, tasks evaluated in parallel (``--eval-parallel``).

    python bench/bench_grpo.py --device cuda --out /tmp/grpo [--tasks softmax,rmsnorm,...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from common import print_table
from kforge.agent.policy.base import Context
from kforge.agent.policy.llm import SYSTEM
from kforge.agent.policy.render import coder_prompt
from kforge.agent.train.llm import TrainSettings, train_llm
from kforge.agent.train.tiny import build_random_model
from kforge.tools.evaluate import EvalOptions
from kforge.tools.hardware import detect_gpu
from kforge.tools.task import load_task

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def records(names: list[str], device: str) -> tuple[list[dict], list[dict]]:
    """(sft rows, grpo rows): each task's coder prompt, with its reference candidate as the answer."""
    sft, grpo = [], []
    gpu = detect_gpu() if device == "cuda" else None
    for name in names:
        task = load_task(EXAMPLES / "tasks" / f"{name}.py")
        ctx = Context(task=task, hardware=gpu, precision="fp32", baseline=None, docs=[], attempts=[], round=1)
        prompt = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": coder_prompt(ctx, device, 0, 1)},
        ]
        code = (EXAMPLES / "candidates" / f"{name}_triton.py").read_text()
        answer = f"## Performance analysis\nFirst round.\n\n## Plan\nOne Triton kernel.\n\n## Code\n```python\n{code}```\n"
        sft.append(
            {"prompt": prompt, "completion": [{"role": "assistant", "content": answer}], "task_name": name}
        )
        grpo.append({"prompt": prompt, "task_name": name, "task_source": task.source})
    return sft, grpo


def write(rows: list[dict], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tasks", default="softmax,gelu_chain,rmsnorm,row_sum")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--warmup-steps", type=int, default=300)
    parser.add_argument("--grpo-steps", type=int, default=4)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--completion-tokens", type=int, default=1400)
    parser.add_argument("--eval-parallel", type=int, default=2)
    args = parser.parse_args()
    sft_rows, grpo_rows = records(args.tasks.split(","), args.device)
    texts = [m["content"] for r in sft_rows for m in r["prompt"] + r["completion"]]
    base = build_random_model(
        texts * 4, args.out / "random", vocab_size=4000, hidden=args.hidden, layers=args.layers,
        heads=max(2, args.hidden // 64),
    )  # fmt: skip
    common = dict(use_cpu=args.device == "cpu", max_length=4096, save_steps=10**6)
    started = time.monotonic()
    warm = train_llm(TrainSettings(
        method="sft", base=str(base), data=write(sft_rows, args.out / "sft-data"), out=args.out / "sft",
        max_steps=args.warmup_steps, learning_rate=1e-3, batch_size=len(sft_rows), lora_r=0, **common,
    ))  # fmt: skip
    sft_s = time.monotonic() - started
    params = sum(p.numel() for p in warm.model.parameters())
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    options = EvalOptions(
        device=args.device, compile_baseline=False, timing_trials=20, trials=3, timeout_s=240
    )
    started = time.monotonic()
    trainer = train_llm(TrainSettings(
        method="grpo", base=str(args.out / "sft"), data=write(grpo_rows, args.out / "grpo-data"),
        out=args.out / "grpo", max_steps=args.grpo_steps, learning_rate=1e-5, batch_size=args.generations * 2,
        num_generations=args.generations, max_completion_length=args.completion_tokens, lora_r=16, lora_alpha=32,
        eval_options=options, eval_parallel=args.eval_parallel, **common,
    ))  # fmt: skip
    grpo_s = time.monotonic() - started
    (reward,) = trainer.reward_funcs
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else 0.0
    rewards = [e["reward"] for e in trainer.state.log_history if "reward" in e]
    rows = [
        ["policy", f"random-init Llama {params / 1e6:.1f}M params ({args.layers} layers, hidden {args.hidden})"],
        ["SFT warm-up", f"{args.warmup_steps} steps, {sft_s:.1f} s, final loss {warm.state.log_history[-2].get('loss', '-')}"],
        ["GRPO steps", f"{trainer.state.global_step} in {grpo_s:.1f} s = {trainer.state.global_step / grpo_s:.3f} steps/s"],
        ["answers per step", f"{args.generations * 2} ({args.generations} per prompt)"],
        ["evaluations", f"{reward.evaluations} in {reward.seconds:.1f} s = {reward.evaluations / max(reward.seconds, 1e-9):.2f}/s"],
        ["answers by status", ", ".join(f"{k} {v}" for k, v in sorted(reward.statuses.items()))],
        ["mean reward per step", ", ".join(f"{r:.3f}" for r in rewards)],
        ["peak GPU memory (GRPO)", f"{peak:.2f} GiB"],
    ]  # fmt: skip
    print_table("GRPO with engine rewards", ["figure", "value"], rows)
    (args.out / "summary.json").write_text(json.dumps({k: v for k, v in rows}, indent=2))


if __name__ == "__main__":
    main()
