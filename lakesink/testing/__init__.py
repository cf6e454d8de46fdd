"""Test tooling, not used by lakesink itself: in-memory parts for the engine-free core
(``memory``), the smallest implementation of each of the core's interfaces.

The servers the tests run (S3, a Spark cluster, Kafka) and the fault injection of the
crash tests live in the repository's ``tests/``, outside the installed package."""
