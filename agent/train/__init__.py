"""Offline training of the kernel-writing policy from recorded trajectories: dataset export
(SFT, preference pairs, contrastive groups), TRL training with LoRA, and the GRPO reward that
calls the evaluation engine."""
