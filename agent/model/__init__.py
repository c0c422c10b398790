"""``kforge model SPEC``: the user's model made faster end to end (:mod:`.run`), the
figures and the patch's header (:mod:`.summary`)."""
