"""``kforge model``: the user's own model, profiled, cut into hot regions that become
KernelBench-format tasks, and given back as a patch measured end to end.

- :mod:`.spec`: ``file.py:factory`` (or a file with ``get_model``/``get_inputs``) to a model
  and its example inputs, at a precision;
- :mod:`.regions`: the modules worth a kernel, their calls and their share of the time;
- :mod:`.extract`: a region written as a task file, checked against the region itself;
- :mod:`.patch`: verified replacements swapped into the model (``kforge.apply``);
- :mod:`.e2e`: the patched model verified and timed against eager and torch.compile;
- :mod:`.job`: the worker jobs that do the above where the user's code may run.

Only torch is imported here: it runs on a bare GPU box, like the rest of ``tools/``.
"""
