"""What operators run against lakesink tables: vacuum, status, metrics, commit or abort by
hand, the audit, migrations, compaction, validation reports and the SQL endpoint."""
