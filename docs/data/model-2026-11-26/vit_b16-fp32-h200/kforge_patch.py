"""kforge patch for vit_b16.full (cuda).

End to end: 1.66x over eager, 1.58x over the best torch.compile mode (predicted from the regions: 1.47x).

Regions replaced:
  blocks.0.mlp (Mlp, 12 instances, 59% of the time): tf32x3-gemm, 1.62x over eager on the region; candidates/r00_Mlp.py
  blocks.0.attn (Attention, 12 instances, 38% of the time): tf32x3-gemm, 1.34x over eager on the region; candidates/r01_Attention.py

Apply it:

    import kforge
    kforge.apply(model, "kforge_patch.py")
"""

REGIONS = [{'kind': 'Mlp',
  'task': 'tasks/r00_Mlp.py',
  'candidate': 'candidates/r00_Mlp.py',
  'instances': ['blocks.0.mlp',
                'blocks.1.mlp',
                'blocks.2.mlp',
                'blocks.3.mlp',
                'blocks.4.mlp',
                'blocks.5.mlp',
                'blocks.6.mlp',
                'blocks.7.mlp',
                'blocks.8.mlp',
                'blocks.9.mlp',
                'blocks.10.mlp',
                'blocks.11.mlp'],
  'inputs': ['x'],
  'fixed': {},
  'shapes': {'x': [[32, 197, 768], 'torch.float32']},
  'groups': {},
  'share': 0.5885663416137628,
  'strategy': 'tf32x3-gemm',
  'speedup_vs_eager': 1.6223526961464925,
  'speedup_vs_compile': 1.6876999977101363},
 {'kind': 'Attention',
  'task': 'tasks/r01_Attention.py',
  'candidate': 'candidates/r01_Attention.py',
  'instances': ['blocks.0.attn',
                'blocks.1.attn',
                'blocks.2.attn',
                'blocks.3.attn',
                'blocks.4.attn',
                'blocks.5.attn',
                'blocks.6.attn',
                'blocks.7.attn',
                'blocks.8.attn',
                'blocks.9.attn',
                'blocks.10.attn',
                'blocks.11.attn'],
  'inputs': ['x'],
  'fixed': {'attn_mask': 'None', 'is_causal': 'False'},
  'shapes': {'x': [[32, 197, 768], 'torch.float32']},
  'groups': {},
  'share': 0.3794811443306624,
  'strategy': 'tf32x3-gemm',
  'speedup_vs_eager': 1.3352866421773057,
  'speedup_vs_compile': 1.3964841958188698}]

WHOLE_MODEL = None  # torch.compile mode of the patched model (None: not compiled)
