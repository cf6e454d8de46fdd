"""Inputs a checkpointed job reads, each a ``lakesink.core.Source``: one module per source."""
