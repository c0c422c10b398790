"""kforge patch for resnet50.full (cuda).

End to end: 1.37x over eager, 1.19x over the best torch.compile mode (predicted from the regions: 1.28x).

Regions replaced:
  layer3.1 (Bottleneck, 5 instances, 24% of the time): tf32x3-conv, 1.23x over eager on the region; candidates/r00_Bottleneck.py
  layer1.1 (Bottleneck, 2 instances, 14% of the time): tf32x3-conv, 1.40x over eager on the region; candidates/r01_Bottleneck.py
  layer2.1 (Bottleneck, 3 instances, 14% of the time): cuda-graph, 1.15x over eager on the region; candidates/r02_Bottleneck.py
  layer4.1 (Bottleneck, 2 instances, 11% of the time): tf32x3-conv, 1.24x over eager on the region; candidates/r03_Bottleneck.py
  layer4.0 (Bottleneck, 1 instances, 9% of the time): tf32x3-conv, 1.43x over eager on the region; candidates/r04_Bottleneck.py
  layer1.0 (Bottleneck, 1 instances, 8% of the time): tf32x3-conv, 1.65x over eager on the region; candidates/r05_Bottleneck.py
  layer2.0 (Bottleneck, 1 instances, 8% of the time): tf32x3-conv, 1.25x over eager on the region; candidates/r06_Bottleneck.py
  layer3.0 (Bottleneck, 1 instances, 8% of the time): tf32x3-conv, 1.30x over eager on the region; candidates/r07_Bottleneck.py

Apply it:

    import kforge
    kforge.apply(model, "kforge_patch.py")
"""

REGIONS = [{'kind': 'Bottleneck',
  'task': 'tasks/r00_Bottleneck.py',
  'candidate': 'candidates/r00_Bottleneck.py',
  'instances': ['layer3.1', 'layer3.2', 'layer3.3', 'layer3.4', 'layer3.5'],
  'inputs': ['x'],
  'fixed': {},
  'shapes': {'x': [[32, 1024, 14, 14], 'torch.float32']},
  'groups': {},
  'share': 0.2402523624986009,
  'strategy': 'tf32x3-conv',
  'speedup_vs_eager': 1.2311938571283094,
  'speedup_vs_compile': 1.5235304899354734},
 {'kind': 'Bottleneck',
  'task': 'tasks/r01_Bottleneck.py',
  'candidate': 'candidates/r01_Bottleneck.py',
  'instances': ['layer1.1', 'layer1.2'],
  'inputs': ['x'],
  'fixed': {},
  'shapes': {'x': [[32, 256, 56, 56], 'torch.float32']},
  'groups': {},
  'share': 0.13994083667976046,
  'strategy': 'tf32x3-conv',
  'speedup_vs_eager': 1.3990835808572588,
  'speedup_vs_compile': 1.7461040321744457},
 {'kind': 'Bottleneck',
  'task': 'tasks/r02_Bottleneck.py',
  'candidate': 'candidates/r02_Bottleneck.py',
  'instances': ['layer2.1', 'layer2.2', 'layer2.3'],
  'inputs': ['x'],
  'fixed': {},
  'shapes': {'x': [[32, 512, 28, 28], 'torch.float32']},
  'groups': {},
  'share': 0.1358642466361094,
  'strategy': 'cuda-graph',
  'speedup_vs_eager': 1.1514392932283728,
  'speedup_vs_compile': 1.3836204239842964},
 {'kind': 'Bottleneck',
  'task': 'tasks/r03_Bottleneck.py',
  'candidate': 'candidates/r03_Bottleneck.py',
  'instances': ['layer4.1', 'layer4.2'],
  'inputs': ['x'],
  'fixed': {},
  'shapes': {'x': [[32, 2048, 7, 7], 'torch.float32']},
  'groups': {},
  'share': 0.11349107544727216,
  'strategy': 'tf32x3-conv',
  'speedup_vs_eager': 1.2426899179158828,
  'speedup_vs_compile': 1.3945104010248246},
 {'kind': 'Bottleneck',
  'task': 'tasks/r04_Bottleneck.py',
  'candidate': 'candidates/r04_Bottleneck.py',
  'instances': ['layer4.0'],
  'inputs': ['x'],
  'fixed': {},
  'shapes': {'x': [[32, 1024, 14, 14], 'torch.float32']},
  'groups': {},
  'share': 0.08974367091565812,
  'strategy': 'tf32x3-conv',
  'speedup_vs_eager': 1.4349450549191234,
  'speedup_vs_compile': 1.5435574317058711},
 {'kind': 'Bottleneck',
  'task': 'tasks/r05_Bottleneck.py',
  'candidate': 'candidates/r05_Bottleneck.py',
  'instances': ['layer1.0'],
  'inputs': ['x'],
  'fixed': {},
  'shapes': {'x': [[32, 64, 56, 56], 'torch.float32']},
  'groups': {},
  'share': 0.08271181538026239,
  'strategy': 'tf32x3-conv',
  'speedup_vs_eager': 1.6511591954460143,
  'speedup_vs_compile': 1.848752873360044},
 {'kind': 'Bottleneck',
  'task': 'tasks/r06_Bottleneck.py',
  'candidate': 'candidates/r06_Bottleneck.py',
  'instances': ['layer2.0'],
  'inputs': ['x'],
  'fixed': {},
  'shapes': {'x': [[32, 256, 56, 56], 'torch.float32']},
  'groups': {},
  'share': 0.08013149599685122,
  'strategy': 'tf32x3-conv',
  'speedup_vs_eager': 1.2464213284569945,
  'speedup_vs_compile': 1.6540862037856043},
 {'kind': 'Bottleneck',
  'task': 'tasks/r07_Bottleneck.py',
  'candidate': 'candidates/r07_Bottleneck.py',
  'instances': ['layer3.0'],
  'inputs': ['x'],
  'fixed': {},
  'shapes': {'x': [[32, 512, 28, 28], 'torch.float32']},
  'groups': {},
  'share': 0.07973636226761938,
  'strategy': 'tf32x3-conv',
  'speedup_vs_eager': 1.3009593293795156,
  'speedup_vs_compile': 1.608972896503652}]

WHOLE_MODEL = None  # torch.compile mode of the patched model (None: not compiled)
