"""The Spark and Delta Lake implementation of the core: the sink, its journal, a checkpoint
store, and what they share (the table format, readers, the session, SQL quoting, the
validation gate). Everything here needs pyspark and delta-spark."""
