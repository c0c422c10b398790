"""kforge patch for gpt2.full (cuda).

End to end: 1.45x over eager, 1.25x over the best torch.compile mode (predicted from the regions: 1.21x).

Regions replaced:
  h.0.mlp (GPT2MLP, 12 instances, 59% of the time): tf32x3-gemm+compile-default, 1.43x over eager on the region; candidates/r00_GPT2MLP.py

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
  'share': 0.5873678334513145,
  'strategy': 'tf32x3-gemm+compile-default',
  'speedup_vs_eager': 1.4307743672811162,
  'speedup_vs_compile': 1.2570490832463619}]

WHOLE_MODEL = None  # torch.compile mode of the patched model (None: not compiled)
