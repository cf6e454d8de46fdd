"""Ready-made jobs, each run by a ``lakesink`` command: a module per job, built on the
library (``ingest``: the orders pipeline of ``lakesink ingest``)."""
