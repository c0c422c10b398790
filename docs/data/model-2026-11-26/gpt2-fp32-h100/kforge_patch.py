"""kforge patch for gpt2.full (cuda).

End to end: 1.74x over eager, 1.46x over the best torch.compile mode (predicted from the regions: 1.61x).

Regions replaced:
  h.0.mlp (GPT2MLP, 12 instances, 61% of the time): tf32x3-gemm+compile-default+cuda-graph, 2.10x over eager on the region; candidates/r00_GPT2MLP.py
  h.0.attn (GPT2Attention, 12 instances, 34% of the time): tf32x3-gemm, 1.21x over eager on the region; candidates/r01_GPT2Attention.py

Apply it:

    import kforge
    kforge.apply(model, "kforge_patch.py")
"""

REGIONS = [{'kind': 'GPT2MLP',
  'task': 'tasks/r00_GPT2MLP.py',
  'candidate': 'candidates/r00_GPT2MLP.py',
  'instances': ['h.0.mlp',
                'h.1.mlp',
                'h.2.mlp',
                'h.3.mlp',
                'h.4.mlp',
                'h.5.mlp',
                'h.6.mlp',
                'h.7.mlp',
                'h.8.mlp',
                'h.9.mlp',
                'h.10.mlp',
                'h.11.mlp'],
  'inputs': ['hidden_states'],
  'fixed': {},
  'shapes': {'hidden_states': [[8, 512, 768], 'torch.float32']},
  'groups': {},
  'share': 0.6137270724429031,
  'strategy': 'tf32x3-gemm+compile-default+cuda-graph',
  'speedup_vs_eager': 2.100845725267351,
  'speedup_vs_compile': 1.6734641708186258},
 {'kind': 'GPT2Attention',
  'task': 'tasks/r01_GPT2Attention.py',
  'candidate': 'candidates/r01_GPT2Attention.py',
  'instances': ['h.0.attn',
                'h.1.attn',
                'h.2.attn',
                'h.3.attn',
                'h.4.attn',
                'h.5.attn',
                'h.6.attn',
                'h.7.attn',
                'h.8.attn',
                'h.9.attn',
                'h.10.attn',
                'h.11.attn'],
  'inputs': ['hidden_states', 'position_ids'],
  'fixed': {'past_key_values': 'None', 'attention_mask': 'None', 'use_cache': 'False'},
  'shapes': {'hidden_states': [[8, 512, 768], 'torch.float32'],
             'position_ids': [[1, 512], 'torch.int64']},
  'groups': {},
  'share': 0.33879989270415867,
  'strategy': 'tf32x3-gemm',
  'speedup_vs_eager': 1.2073851602069463,
  'speedup_vs_compile': 1.330289586940414}]

WHOLE_MODEL = None  # torch.compile mode of the patched model (None: not compiled)
