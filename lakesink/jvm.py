"""JVM servers lakesink runs beside Spark (the metastore, a Kafka broker for tests): their
jars, fetched from Maven Central with the Ivy jar pyspark ships, and their background
processes, started with a pid file and stopped by it. Java 17 must be on ``PATH``."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from lakesink.errors import ConfigurationError

__all__ = [
    "MAVEN_CENTRAL",
    "fetch_jars",
    "java",
    "listening",
    "read_pid",
    "start_daemon",
    "stop_daemon",
    "tail",
    "wait_gone",
]

log = logging.getLogger(__name__)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
_IVY_SETTINGS = f"""<ivysettings>
  <settings defaultResolver="central"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true" root="{MAVEN_CENTRAL}"/>
  </resolvers>
</ivysettings>
"""


def java() -> str:
    """The ``java`` on ``PATH``."""
    found = shutil.which("java")
    if found is None:
        raise ConfigurationError("java is not on PATH; install Java 17 (e.g. openjdk-17-jre)")
    return found


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


def start_daemon(
    command: Sequence[str],
    *,
    folder: Path,
    log_name: str,
    pid_name: str,
    ready: Callable[[], bool],
    timeout: float,
    what: str,
) -> int:
    """Start ``command`` in the background in ``folder``; return its pid once ``ready()``.

    Its output goes to ``folder/log_name``, its pid to ``folder/pid_name``.

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
    raise ConfigurationError(
        f"{what} {failure}; see its log {log_path} (port taken?):\n"
        f"{tail(log_path.read_text(errors='replace'))}"
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
    import pyspark

    jars = sorted(Path(pyspark.__file__).parent.joinpath("jars").glob("ivy-*.jar"))
    if not jars:
        raise ConfigurationError(
            "pyspark ships no Ivy jar (pyspark/jars/ivy-*.jar) to fetch jars with; reinstall "
            "pyspark, or put the jars into their folder by hand"
        )
    return jars[-1]
