"""What operators run against lakesink tables: vacuum, status, commit or abort by hand,
audit, migrations, and the shared metastore server."""
