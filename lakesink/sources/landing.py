"""A landing folder: new files consumed exactly once, a ``Source`` for a checkpointed job.

Files are taken in name order; the position is the set of names consumed so far (JSON), so
a file that arrives late with an early name is still read. It grows with the number of
files the folder ever held: for a folder that receives files without end, read it with
Spark's own file source instead.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Literal
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from lakesink.core import Batch, Quarantined, Source
from lakesink.errors import ConfigurationError
from lakesink.storage.files import copy_file, remove_file, write_bytes
from lakesink.storage.location import join, parent
from lakesink.storage.location import name as location_name

__all__ = ["FileFormat", "LandingFolder", "literal_path"]

log = logging.getLogger(__name__)

FileFormat = Literal["json", "csv", "parquet"]
CORRUPT = "_corrupt_record"
QUARANTINE = "_quarantine"


class LandingFolder(Source[DataFrame]):
    """New files of one format in ``folder``, read with ``schema``.

    Files are taken in name order (producers should name them so that order is arrival
    order, e.g. with a timestamp prefix); hidden files (``.``/``_``) are ignored, as
    Spark does, so a producer can write ``.name.tmp`` and rename it when complete.
    """

    def __init__(
        self, spark: SparkSession, folder: str, *, file_format: FileFormat, schema: StructType
    ) -> None:
        self.folder = Path(folder).resolve()
        if not self.folder.is_dir():
            raise ConfigurationError(
                f"landing folder {self.folder} does not exist; create it or fix --landing"
            )
        if file_format not in ("json", "csv", "parquet"):
            raise ConfigurationError(f"unknown file format {file_format!r}: json, csv or parquet")
        self.spark = spark
        self.file_format = file_format
        self.schema = schema

    def next_batch(self, position: str | None, *, limit: int) -> Batch | None:
        """The next ``limit`` files not consumed yet, in name order."""
        consumed = set(json.loads(position)) if position else set()
        waiting = sorted(
            p.name
            for p in self.folder.iterdir()
            if p.is_file() and not p.name.startswith((".", "_")) and p.name not in consumed
        )
        if not waiting:
            return None
        taken = waiting[:limit]
        after = json.dumps(sorted(consumed.union(taken)))
        return Batch(tuple(taken), after, remaining=len(waiting) - len(taken))

    def read(self, batch: Batch) -> tuple[DataFrame, tuple[Quarantined, ...]]:
        """Rows of the good files, and the files that did not parse (moved to quarantine)."""
        data, quarantined = self._read_files(batch.items)
        return data, tuple(quarantined)

    def _read_files(self, files: Sequence[str]) -> tuple[DataFrame, list[Quarantined]]:
        if self.file_format == "parquet":
            return self._read_parquet(files)
        paths = [literal_path(self.folder / name) for name in files]
        schema = StructType([*self.schema.fields, StructField(CORRUPT, StringType(), True)])
        reader = self.spark.read.schema(schema).option("mode", "PERMISSIVE")
        reader = reader.option("columnNameOfCorruptRecord", CORRUPT)
        if self.file_format == "csv":
            reader = reader.option("header", "true")
        frame = reader.format(self.file_format).load(paths)
        # Spark refuses queries on the corrupt-record column of a raw scan: cache first.
        parsed = frame.withColumn(
            "_file", F.element_at(F.split(F.input_file_name(), "/"), -1)
        ).cache()
        bad = {
            unquote(r["_file"]): r[CORRUPT]
            for r in parsed.where(F.col(CORRUPT).isNotNull()).select("_file", CORRUPT).collect()
        }
        parsed.unpersist()
        quarantined = [
            self._quarantine(name, f"does not parse as {self.file_format}: {line[:200]!r}")
            for name, line in sorted(bad.items())
        ]
        good = [literal_path(self.folder / name) for name in files if name not in bad]
        if not good:
            return self.spark.createDataFrame([], self.schema), quarantined
        # Read again without the quarantined files, so no later action touches them, and
        # without the corrupt-record column, which Spark refuses to count on its own: what
        # is left parsed, and a file changed since fails the job rather than losing rows.
        again = self.spark.read.schema(self.schema).option("mode", "FAILFAST")
        if self.file_format == "csv":
            again = again.option("header", "true")
        return again.format(self.file_format).load(good), quarantined

    def _read_parquet(self, files: Sequence[str]) -> tuple[DataFrame, list[Quarantined]]:
        good, quarantined = [], []
        for name in files:
            path = literal_path(self.folder / name)
            try:
                self.spark.read.schema(self.schema).parquet(path).limit(1).collect()
                good.append(path)
            except Exception as exc:  # a broken file must not stop the good ones
                quarantined.append(self._quarantine(name, str(exc).splitlines()[0]))
        frame = (
            self.spark.read.schema(self.schema).parquet(*good)
            if good
            else self.spark.createDataFrame([], self.schema)
        )
        return frame, quarantined

    def _quarantine(self, name: str, reason: str) -> Quarantined:
        return quarantine(str(self.folder / name), reason)


def quarantine(file: str, reason: str, *, keep: bool = False) -> Quarantined:
    """Set a landing file that does not parse aside: into ``_quarantine/`` beside it, with
    ``<name>.reason.txt`` saying why (a local path or an object-store URI).

    Args:
        file: The file.
        reason: Why it was set aside.
        keep: Copy it rather than move it: a streaming file source that has recorded the
            file reads it again when a batch is replayed, and copying again is harmless.
    """
    name = location_name(file)
    target = join(parent(file), QUARANTINE)
    copy_file(file, join(target, name))
    write_bytes(join(target, f"{name}.reason.txt"), f"{reason}\n".encode())
    if not keep:
        remove_file(file)
    log.warning("quarantined %s: %s", name, reason)
    return Quarantined(name, reason)


# Hadoop's glob syntax: Spark expands a read path holding any of these as a pattern.
_GLOB_CHARS = "\\*?[]{}"


def literal_path(path: Path) -> str:
    """``path`` for a Spark read that means exactly that file, glob characters escaped.

    A landing file may be named ``orders[1].json`` or ``a*.json``: unescaped, Spark would
    read whatever the pattern matches (other files too, or none).
    """
    return "".join("\\" + c if c in _GLOB_CHARS else c for c in str(path))
