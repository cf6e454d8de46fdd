"""Test tooling, not used by lakesink itself: in-memory parts for the engine-free core
(``memory``), fault injection at protocol steps (``faults``) and a local Spark standalone
cluster (``cluster``)."""
