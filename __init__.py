"""kforge: makes PyTorch code faster on your GPU, and proves it."""

__version__ = "0.1.0"


def apply(model, patch):  # type: ignore[no-untyped-def]
    """Swap the verified replacements of a ``kforge model`` patch (its ``kforge_patch.py`` or
    folder) into ``model``, in place; returns ``model``. ``restore(model)`` undoes it."""
    from .tools.model.patch import apply as apply_patch

    return apply_patch(model, patch)


def restore(model):  # type: ignore[no-untyped-def]
    """Put back every module that :func:`apply` replaced."""
    from .tools.model.patch import restore as restore_patch

    return restore_patch(model)
