"""lakesink's own tables and what every table it writes records about itself: the table
format (``format``: hidden columns, which rows are committed or pending, properties,
format versions), the journal of every transaction's states, a job's checkpoint table,
and their reads and appends through delta-rs (``deltars``), which need no JVM."""
