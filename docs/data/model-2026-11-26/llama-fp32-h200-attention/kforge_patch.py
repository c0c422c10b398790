"""kforge patch for llama.full (cuda).

End to end: 1.91x over eager, 1.71x over the best torch.compile mode (predicted from the regions: 1.63x).

Regions replaced:
  layers.0.mlp (LlamaMLP, 16 instances, 68% of the time): tf32x3-gemm, 1.77x over eager on the region; candidates/r00_LlamaMLP.py
  layers.0.self_attn (LlamaAttention, 16 instances, 28% of the time): tf32x3-gemm, 1.47x over eager on the region; candidates/r01_LlamaAttention.py

Apply it:

    import kforge
    kforge.apply(model, "kforge_patch.py")
"""

REGIONS = [{'kind': 'LlamaMLP',
  'task': 'tasks/r00_LlamaMLP.py',
  'candidate': 'candidates/r00_LlamaMLP.py',
  'instances': ['layers.0.mlp',
                'layers.1.mlp',
                'layers.2.mlp',
                'layers.3.mlp',
                'layers.4.mlp',
                'layers.5.mlp',
                'layers.6.mlp',
                'layers.7.mlp',
                'layers.8.mlp',
                'layers.9.mlp',
                'layers.10.mlp',
                'layers.11.mlp',
                'layers.12.mlp',
                'layers.13.mlp',
                'layers.14.mlp',
                'layers.15.mlp'],
  'inputs': ['x'],
  'fixed': {},
  'shapes': {'x': [[4, 512, 2048], 'torch.float32']},
  'groups': {},
  'share': 0.6829090834879379,
  'strategy': 'tf32x3-gemm',
  'speedup_vs_eager': 1.7681167862755895,
  'speedup_vs_compile': 1.791285795506726},
 {'kind': 'LlamaAttention',
  'task': 'tasks/r01_LlamaAttention.py',
  'candidate': 'candidates/r01_LlamaAttention.py',
  'instances': ['layers.0.self_attn',
                'layers.1.self_attn',
                'layers.2.self_attn',
                'layers.3.self_attn',
                'layers.4.self_attn',
                'layers.5.self_attn',
                'layers.6.self_attn',
                'layers.7.self_attn',
                'layers.8.self_attn',
                'layers.9.self_attn',
                'layers.10.self_attn',
                'layers.11.self_attn',
                'layers.12.self_attn',
                'layers.13.self_attn',
                'layers.14.self_attn',
                'layers.15.self_attn'],
  'inputs': ['hidden_states', 'position_embeddings_0', 'position_embeddings_1', 'position_ids'],
  'fixed': {'attention_mask': 'None', 'past_key_values': 'None', 'use_cache': 'False'},
  'shapes': {'hidden_states': [[4, 512, 2048], 'torch.float32'],
             'position_embeddings_0': [[1, 512, 64], 'torch.float32'],
             'position_embeddings_1': [[1, 512, 64], 'torch.float32'],
             'position_ids': [[1, 512], 'torch.int64']},
  'groups': {'position_embeddings': ['position_embeddings_0', 'position_embeddings_1']},
  'share': 0.28429832088369544,
  'strategy': 'tf32x3-gemm',
  'speedup_vs_eager': 1.4735065053361984,
  'speedup_vs_compile': 1.1835310130376377}]

WHOLE_MODEL = None  # torch.compile mode of the patched model (None: not compiled)
