"""JVM servers lakesink runs beside Spark (the metastore, a Kafka broker for tests): their
jars, fetched from Maven Central with the Ivy jar pyspark ships, and their background
processes, started with a pid file and stopped by it; Delta's jars for a local session's
class path, fetched the same way; and the small jars lakesink builds from its own Java
source with ``javac`` on first use (the S3 log store, the SQL endpoint's login check).
Java 17 must be on ``PATH``."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any, cast

from lakesink.errors import ConfigurationError

__all__ = [
    "JAVA_RELEASE",
    "MAVEN_CENTRAL",
    "build_jar",
    "cache_dir",
    "delta_jars",
    "delta_maven_coordinate",
    "fetch_jars",
    "java",
    "javac",
    "listening",
    "pyspark_jars",
    "read_pid",
    "session_jvm",
    "source_digest",
    "start_daemon",
    "stop_daemon",
    "tail",
    "under_spark_submit",
    "wait_gone",
]

log = logging.getLogger(__name__)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
JAVA_RELEASE = "17"
IVY_DIR_ENV = "LAKESINK_IVY_DIR"
_IVY_SETTINGS = f"""<ivysettings>
  <settings defaultResolver="central"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true" root="{MAVEN_CENTRAL}"/>
  </resolvers>
</ivysettings>
"""


def under_spark_submit() -> bool:
    """Whether this process runs under ``spark-submit``, which starts the driver JVM first
    and hands it over to Python through this variable."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def session_jvm(spark: Any) -> Any | None:
    """The JVM behind a classic Spark session, through Py4J; None for a Spark Connect
    client's session, whose JVM is a server's: nothing of it is reachable from here."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return None
    return spark._jvm


def java() -> str:
    """The ``java`` on ``PATH``."""
    found = shutil.which("java")
    if found is None:
        raise ConfigurationError("java is not on PATH; install Java 17 (e.g. openjdk-17-jre)")
    return found


def javac() -> str:
    """The JDK's ``javac``: ``$JAVA_HOME/bin/javac``, else the one on ``PATH``.

    Raises:
        ConfigurationError: There is none (a JRE only).
    """
    home = os.environ.get("JAVA_HOME")
    candidates = [Path(home) / "bin" / "javac"] if home else []
    found = shutil.which("javac")
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise ConfigurationError(
        "javac is not on PATH (nor in $JAVA_HOME/bin): lakesink builds its S3 log store and "
        "the SQL endpoint's login check from source and needs a JDK 17 or later, not only a "
        "JRE; install one (Debian: apt-get install openjdk-17-jdk-headless) or set JAVA_HOME "
        "to a JDK"
    )


def pyspark_jars() -> Path:
    """The folder of the installed pyspark's jars."""
    try:
        import pyspark
    except ImportError as exc:
        raise ConfigurationError(
            "pyspark is not installed: pip install 'lakesink[spark]' (Spark on this machine)"
        ) from exc
    return Path(pyspark.__file__).resolve().parent / "jars"


def cache_dir(name: str, ivy_dir: str | None = None) -> Path:
    """lakesink's cache folder ``name``: beside the Ivy cache (``ivy_dir`` or
    ``$LAKESINK_IVY_DIR``), else in ``~/.cache/lakesink``."""
    ivy_dir = ivy_dir or os.environ.get(IVY_DIR_ENV)
    if ivy_dir:
        return Path(ivy_dir).resolve().parent / name
    return Path.home() / ".cache" / "lakesink" / name


def build_jar(jar: Path, source_root: Path, class_path: Sequence[str | Path], *, what: str) -> Path:
    """The jar of the Java sources under ``source_root``, compiled with ``javac --release
    17`` against ``class_path`` unless ``jar`` exists already (its name should change with
    the sources: see ``source_digest``).

    Raises:
        ConfigurationError: No ``javac``, no source, or the build failed.
    """
    if jar.is_file():
        return jar
    sources = sorted(source_root.rglob("*.java"))
    if not sources:
        raise ConfigurationError(
            f"the Java source of {what} is missing from {source_root}; reinstall lakesink"
        )
    jar.parent.mkdir(parents=True, exist_ok=True)
    compiler = javac()
    log.info("building %s into %s", what, jar)
    with tempfile.TemporaryDirectory(prefix="lakesink-javac-", dir=jar.parent) as work:
        classes = Path(work, "classes")
        command = [
            compiler, "--release", JAVA_RELEASE, "-nowarn", "-encoding", "UTF-8",
            "-cp", os.pathsep.join(map(str, class_path)), "-d", str(classes), *map(str, sources),
        ]  # fmt: skip
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired as exc:
            raise ConfigurationError(f"javac took over 5 minutes to build {jar.name}") from exc
        if result.returncode != 0:
            raise ConfigurationError(
                f"javac could not build {what} from {source_root}:\n"
                f"{tail(result.stdout + result.stderr, 30)}"
            )
        staged = Path(work, jar.name)
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(
                "META-INF/MANIFEST.MF",
                f"Manifest-Version: 1.0\nCreated-By: lakesink\nX-Lakesink-Source: {jar.stem}\n",
            )
            for compiled in sorted(classes.rglob("*.class")):
                archive.write(compiled, compiled.relative_to(classes).as_posix())
        # Atomic: a test worker or job building at the same time never sees half a jar.
        os.replace(staged, jar)
    return jar


def source_digest(source_root: Path, salt: str) -> str:
    """A digest of the Java sources under ``source_root`` and of ``salt`` (what else the
    build depends on, such as a library's version), to name their jar by."""
    digest = hashlib.sha256(f"release {JAVA_RELEASE}; {salt}\n".encode())
    for source in sorted(source_root.rglob("*.java")):
        digest.update(source.relative_to(source_root).as_posix().encode() + b"\0")
        digest.update(source.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def fetch_jars(dependencies: Sequence[str], target: Path, *, what: str) -> Path:
    """Fetch ``group:artifact:version`` dependencies, with theirs, into ``target``.

    Does nothing when ``target`` has a ``.complete`` marker from an earlier fetch.

    Raises:
        ConfigurationError: Maven Central could not be reached or lacks a jar.
    """
    target = target.resolve()
    marker = target / ".complete"
    if marker.is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    log.info("fetching the %s jars from Maven Central into %s", what, target)
    lines = []
    for coordinate in dependencies:
        group, artifact, version = coordinate.split(":")
        lines.append(
            f'<dependency org="{group}" name="{artifact}" rev="{version}" conf="default->default"/>'
        )
    module = (
        '<ivy-module version="2.0"><info organisation="lakesink" module="jars"/>'
        f"<dependencies>{''.join(lines)}</dependencies></ivy-module>"
    )
    with tempfile.TemporaryDirectory(prefix="lakesink-ivy-") as work:
        settings, ivy = Path(work, "ivysettings.xml"), Path(work, "ivy.xml")
        settings.write_text(_IVY_SETTINGS)
        ivy.write_text(module)
        command = [
            java(), "-jar", str(_ivy_jar()),
            "-settings", str(settings),
            "-cache", str(Path(work, "cache")),
            "-ivy", str(ivy),
            "-confs", "default",
            "-warn",
            "-retrieve", str(target / "[artifact]-[revision](-[classifier]).[ext]"),
        ]  # fmt: skip
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired as exc:
            raise ConfigurationError(
                f"fetching the {what} jars from {MAVEN_CENTRAL} took over 15 minutes; "
                f"check the network, or put them into {target} by hand"
            ) from exc
    if result.returncode != 0:
        raise ConfigurationError(
            f"could not fetch the {what} jars ({', '.join(dependencies)}) from {MAVEN_CENTRAL} "
            f"into {target}; check that Maven Central is reachable. Ivy said:\n"
            f"{tail(result.stdout + result.stderr)}"
        )
    marker.write_text("\n".join(dependencies) + "\n")
    return target


def delta_maven_coordinate() -> str:
    """The Maven coordinate of the Delta jar matching the installed pyspark and delta-spark.

    A cluster user passes it to ``spark-submit --packages``.
    """
    spark_minor = ".".join(version("pyspark").split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_2.13:{version('delta-spark')}"


def delta_jars(ivy_dir: str | None = None) -> list[Path]:
    """Delta's jars for a local driver's class path, fetched from Maven Central once into a
    cache folder (beside ``ivy_dir`` or ``$LAKESINK_IVY_DIR``, else ``~/.cache/lakesink``).

    Read in place from the class path, they spare every start of a local session what
    ``--packages`` costs: an Ivy resolution, and a class loader of their own that the JVM's
    class-data sharing does not cover (a sink job's start took 6.6 s that way, 3.5 s so).
    Only the jars that add classes are kept: the class path comes before pyspark's jars,
    and Delta's dependencies bring older copies of Spark's own (Jackson, Hadoop, Parquet),
    which must not replace them. As packages they never did: Spark's loader asks the JVM's
    class path first.

    Raises:
        ConfigurationError: Maven Central could not be reached or lacks a jar.
    """
    coordinate = delta_maven_coordinate()
    folder = cache_dir(f"delta-jars-{coordinate.split(':', 1)[1].replace(':', '-')}", ivy_dir)
    if not (folder / ".complete").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        # Made aside and moved in whole, marker included: a parallel start, or one killed
        # midway, never sees a folder that still holds the jars that would replace Spark's.
        draft = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        draft.chmod(0o755)  # a cache other users of the machine may read
        try:
            fetch_jars([coordinate], draft, what=coordinate)
            shipped = _class_names(pyspark_jars().glob("*.jar"))
            for jar in draft.glob("*.jar"):
                if _class_names([jar]) & shipped:
                    jar.unlink()
            draft.rename(folder)
        except OSError:  # another process moved its folder in first
            if not (folder / ".complete").is_file():
                raise
        finally:
            shutil.rmtree(draft, ignore_errors=True)
    return sorted(folder.glob("*.jar"))


def _class_names(jars: Iterable[Path]) -> set[str]:
    names: set[str] = set()
    for jar in jars:
        with zipfile.ZipFile(jar) as archive:
            names.update(
                name
                for name in archive.namelist()
                # Every modular jar has a module-info, and multi-release copies sit apart.
                if name.endswith(".class")
                and not name.startswith("META-INF/")
                and name != "module-info.class"
            )
    return names


def start_daemon(
    command: Sequence[str],
    *,
    folder: Path,
    log_name: str,
    pid_name: str,
    ready: Callable[[], bool],
    timeout: float,
    what: str,
    env: Mapping[str, str] | None = None,
) -> int:
    """Start ``command`` in the background in ``folder``; return its pid once ``ready()``.

    Its output goes to ``folder/log_name``, its pid to ``folder/pid_name``; ``env`` adds
    to this process's environment.

    Raises:
        ConfigurationError: It exited, or was not ready within ``timeout`` seconds (it is
            then killed); the message quotes the end of its log.
    """
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / log_name
    with open(log_path, "ab") as output:
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=folder,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # outlives the command that started it
        )
    (folder / pid_name).write_text(f"{process.pid}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if ready():
            log.info("%s up (pid %s)", what, process.pid)
            return process.pid
        time.sleep(0.2)
    code = process.poll()
    if code is None:
        process.kill()
        process.wait()
        failure = f"did not come up within {timeout:.0f}s"
    else:
        failure = f"exited with code {code}"
    (folder / pid_name).unlink(missing_ok=True)
    text = log_path.read_text(errors="replace")
    # A daemon that fails keeps logging while it shuts down: its first error is the cause.
    errors = [line for line in text.splitlines() if " ERROR " in line or "FATAL" in line][:3]
    raise ConfigurationError(
        f"{what} {failure}; see its log {log_path} (port taken?):\n"
        + "".join(f"{line}\n" for line in errors)
        + ("...\n" if errors else "")
        + tail(text)
    )


def stop_daemon(pid_file: Path, *, timeout: float, what: str) -> bool:
    """End the process of ``pid_file`` (SIGTERM, then SIGKILL); return whether one ran."""
    pid = read_pid(pid_file)
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink(missing_ok=True)
        return False
    if not wait_gone(pid, timeout):
        log.warning("%s (pid %s) ignored SIGTERM for %.0fs; killing it", what, pid, timeout)
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid, 10.0)
    pid_file.unlink(missing_ok=True)
    log.info("%s stopped", what)
    return True


def daemon_state(
    directory: str | Path, state_file: str, *, what: str, module: str
) -> dict[str, Any]:
    """What a test daemon (``python -m module start --dir``) recorded in its state file.

    Raises:
        ConfigurationError: None was started from ``directory``.
    """
    state = Path(directory).resolve() / state_file
    if not state.is_file():
        raise ConfigurationError(
            f"no {what} was started from {state.parent}; start one: "
            f"python -m {module} start --dir {state.parent}"
        )
    return cast(dict[str, Any], json.loads(state.read_text()))


def stop_recorded_daemon(
    directory: str | Path, pid_file: str, state_file: str, *, timeout: float, what: str
) -> bool:
    """Stop the daemon started from ``directory`` and forget its state; return whether it ran."""
    folder = Path(directory).resolve()
    stopped = stop_daemon(folder / pid_file, timeout=timeout, what=f"the {what} of {folder}")
    (folder / state_file).unlink(missing_ok=True)
    return stopped


def listening(host: str, port: int) -> bool:
    """Whether something accepts connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def read_pid(pid_file: Path | None) -> int | None:
    """The pid in a pid file, or None."""
    if pid_file is None or not pid_file.is_file():
        return None
    text = pid_file.read_text().strip()
    return int(text) if text.isdigit() else None


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``pid`` to end (reaping it if it is a child)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                pass
        time.sleep(0.1)
    return False


def tail(text: str, lines: int = 20) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.strip().splitlines()[-lines:])


def _ivy_jar() -> Path:
    jars = sorted(pyspark_jars().glob("ivy-*.jar"))
    if not jars:
        raise ConfigurationError(
            "pyspark ships no Ivy jar (pyspark/jars/ivy-*.jar) to fetch jars with; reinstall "
            "pyspark, or put the jars into their folder by hand"
        )
    return jars[-1]
