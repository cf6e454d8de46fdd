"""An incremental file source: new files in a landing folder, consumed exactly once.

The position is the set of files already consumed. It is stored with each completed
checkpoint, so a restarted job consumes exactly the files no completed checkpoint took.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from lakesink.errors import ConfigurationError

__all__ = ["FileFormat", "LandingFolder", "Quarantined", "SourcePosition"]

log = logging.getLogger(__name__)

FileFormat = Literal["json", "csv", "parquet"]
CORRUPT = "_corrupt_record"
QUARANTINE = "_quarantine"


@dataclass(frozen=True)
class SourcePosition:
    """The files consumed so far (names relative to the landing folder)."""

    consumed: frozenset[str] = frozenset()

    def to_json(self) -> str:
        return json.dumps(sorted(self.consumed))

    @classmethod
    def from_json(cls, text: str | None) -> SourcePosition:
        return cls(frozenset(json.loads(text))) if text else cls()

    def plus(self, files: Iterable[str]) -> SourcePosition:
        return SourcePosition(self.consumed | frozenset(files))


@dataclass(frozen=True)
class Quarantined:
    """A landing file that did not parse, moved aside with the reason."""

    file: str
    reason: str


class LandingFolder:
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

    def pending(self, position: SourcePosition) -> list[str]:
        """Files not consumed yet, in name order."""
        names = sorted(
            p.name
            for p in self.folder.iterdir()
            if p.is_file() and not p.name.startswith((".", "_"))
        )
        return [name for name in names if name not in position.consumed]

    def read(self, files: Sequence[str]) -> tuple[DataFrame, list[Quarantined]]:
        """Rows of the good files, and the files that did not parse (moved to quarantine)."""
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
        # Read again without the quarantined files, so no later action touches them.
        frame = reader.format(self.file_format).load(good)
        return frame.where(F.col(CORRUPT).isNull()).drop(CORRUPT), quarantined

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
        target = self.folder / QUARANTINE
        target.mkdir(exist_ok=True)
        shutil.move(str(self.folder / name), str(target / name))
        (target / f"{name}.reason.txt").write_text(reason + "\n")
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
