"""The servers the tests, the benchmarks and the crash-point harness run on loopback: an S3
server (``s3``), a Spark standalone cluster (``cluster``) and a Kafka broker (``kafka``).

Test tooling, kept out of the installed package. Each is also a command run from the
repository's root (what ``make s3-up``, ``make cluster-up`` and ``make kafka-up`` run):
``python tests/servers/s3.py start --dir .cache/s3``. Imported as ``servers.s3`` with
``tests/`` on ``sys.path``, as pytest puts it there.
"""
