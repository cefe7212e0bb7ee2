"""Layout -> Report: how every array of the train step is sharded, and what to watch out for.

Takes a ``Layout`` and the reading's abstract model; gives a frozen ``Report``:

- ``report``: the report's data (``ArrayInfo``, ``Totals``, ``Finding``, ``Report``), which every interface reads;
- ``analyzer``: ``analyze`` (one call into the reading, the rules resolved with their trace, shard shapes, bytes)
  and the report's JSON form;
- ``findings``: what the report says beside the arrays (errors JAX would refuse, warnings, notes);
- ``values``: the forward values with their types' shardings (Explicit axes) or as propagated (Auto);
- ``presets``: rule sets written for a model's logical names.
"""
