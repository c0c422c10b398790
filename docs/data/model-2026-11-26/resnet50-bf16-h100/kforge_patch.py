"""kforge patch for resnet50.full (cuda). Then the whole model goes through torch.compile(mode='reduce-overhead'), which measured fastest.

End to end: 2.59x over eager, 1.00x over the best torch.compile mode (predicted from the regions: -).

Regions replaced:
  none: torch.compile(mode='reduce-overhead') of the model as it is measured fastest

Apply it:

    import kforge
    kforge.apply(model, "kforge_patch.py")
"""

REGIONS = []

WHOLE_MODEL = 'reduce-overhead'  # torch.compile mode of the patched model (None: not compiled)
