"""The embedded policy's strategies: each family module lists the candidates it can make for
a task (as :class:`~.source.Spec` objects) and :mod:`.registry` turns a Spec into source."""
