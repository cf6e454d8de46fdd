"""The Delta target table engine: ``DeltaSink`` (the protocol's hooks on a Delta table), its
two commits (the MERGE, and the metadata commit in ``publish``) and Delta's VACUUM as the
vacuum runs it (``vacuum``). A second table engine would be a sibling package reusing
``lakesink.tables`` (the journal, the table format), ``lakesink.readers``,
``lakesink.spark`` (the session, the validation gate) and ``lakesink.ops``."""
