"""Spark glue, engine-neutral: the Delta-ready session and its metastore, session settings
taken in turns and conflict retries, quoting of names into Spark SQL, and the validation
gate (a Great Expectations suite on a DataFrame)."""
