"""Readers of lakesink tables' committed rows, one module per engine: ``spark`` (a
DataFrame, a downstream stream, the catalog views, a group's tables at one cut, the rows a
check audits) and ``deltars`` (Arrow through delta-rs, no JVM: DuckDB, polars, pandas).

Which rows are committed is the table format's to say (``lakesink.tables.format``); the
readers take it in their engine's form.
"""
