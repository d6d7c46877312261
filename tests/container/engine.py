"""A real Docker engine for the container tests, made ready on this machine when it is not.

* :func:`ensure_tools` installs Debian's ``docker.io`` package (daemon, CLI, containerd, runc) when
  ``dockerd`` is missing and Debian's ``docker-compose`` package when no compose implementation
  answers; without root or apt-get it fails with what is missing and how to install it (never a skip).
* :class:`Daemon` starts ``dockerd`` when no daemon answers and stops only the daemon it started.
  Images and layers stay in the daemon's data root between runs, so a second run builds from cache.
* :func:`ensure_base_image` builds the base image locally with ``debootstrap`` when it cannot be
  pulled: the Debian release the image's tag names (``bookworm``, whatever release this machine runs),
  from the Debian mirror this machine's apt sources name (read at run time); the result is kept under
  its tag, so it is built once.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "container"


class EngineUnavailable(RuntimeError):
    """The Docker engine cannot be made ready here; the message says why and what to do."""


def _run(cmd: list[str], timeout: float = 120, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]
    except FileNotFoundError as exc:
        raise EngineUnavailable(f"{cmd[0]}: not found") from exc
    if check and p.returncode != 0:
        raise EngineUnavailable(f"{' '.join(cmd)} failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-2000:]}")
    return p  # type: ignore[no-any-return]


def _apt_install(packages: list[str]) -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise EngineUnavailable(
            f"the container tests need a Docker engine: {' '.join(packages)} missing, and this user cannot "
            "install them (needs root and apt-get); install Debian's docker.io and docker-compose packages"
        )
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log = CACHE / "apt.log"
    CACHE.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        for cmd in (
            ["apt-get", *lock, "update"],
            ["apt-get", *lock, "install", "-y", "--no-install-recommends", *packages],
        ):
            p = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=900)
            if p.returncode != 0:
                raise EngineUnavailable(f"{' '.join(cmd)} failed ({p.returncode}); see {log}")


def compose_command() -> list[str] | None:
    """``docker compose`` (the v2 plugin) when it answers, else Debian's ``docker-compose``, else None."""
    for cmd in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cmd[0]) is None:
            continue
        if subprocess.run([*cmd, "version"], capture_output=True, timeout=30).returncode == 0:
            return cmd
    return None


def ensure_tools() -> list[str]:
    """Install what is missing of dockerd, the docker CLI and a compose; return the compose command."""
    missing: list[str] = []
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        missing.append("docker.io")
    if compose_command() is None:
        missing.append("docker-compose")
    if missing:
        _apt_install(missing)
    compose = compose_command()
    if compose is None:
        raise EngineUnavailable("no compose implementation answers after installing docker-compose")
    return compose


def daemon_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@dataclass
class Daemon:
    """The Docker daemon for a test session: the one already answering, or one started here."""

    proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def ensure(cls, timeout_s: float = 60) -> Daemon:
        if daemon_answers():
            return cls()
        CACHE.mkdir(parents=True, exist_ok=True)
        log = (CACHE / "dockerd.log").open("ab")
        proc = subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while not daemon_answers():
            if proc.poll() is not None:
                raise EngineUnavailable(f"dockerd exited with {proc.returncode}; see {CACHE / 'dockerd.log'}")
            if time.monotonic() > deadline:
                proc.terminate()
                raise EngineUnavailable(f"dockerd did not answer within {timeout_s:.0f} s; see {CACHE / 'dockerd.log'}")
            time.sleep(0.2)
        return cls(proc)

    @property
    def started_here(self) -> bool:
        return self.proc is not None

    def stop(self, timeout_s: float = 30) -> None:
        """Stop the daemon when this object started it (SIGTERM, then SIGKILL after ``timeout_s``)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def image_exists(tag: str) -> bool:
    return _run(["docker", "image", "inspect", tag], check=False).returncode == 0


# apt sources: one-line "deb [opts] URI SUITE COMPONENTS..." and deb822 stanzas (Types/URIs/Suites).
_LIST_LINE = re.compile(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+(.*)$")


def apt_mirrors(codename: str, sources: Path = Path("/etc/apt")) -> list[str]:
    """The Debian archive URIs this machine's apt sources use for ``codename`` (its main suite, not
    -security or -updates), in the order apt reads them."""
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]
    out: list[str] = []
    for f in files:
        if not f.is_file():
            continue
        text = f.read_text(errors="replace")
        if f.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line:
                        continue
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
                if "deb" not in fields.get("types", "").split():
                    continue
                if codename in fields.get("suites", "").split() and "main" in fields.get("components", "").split():
                    out += fields.get("uris", "").split()
        elif f.name == "sources.list" or f.suffix == ".list":
            for line in text.splitlines():
                m = _LIST_LINE.match(line)
                if m and m.group(2) == codename and "main" in m.group(3).split():
                    out.append(m.group(1))
    return list(dict.fromkeys(out))


def debootstrap_mirror(release: str, sources: Path = Path("/etc/apt")) -> str:
    """The mirror to debootstrap ``release`` from: one this machine's apt sources list for ``release``,
    else one they list for the machine's own release (a Debian archive serves every release)."""
    mirrors = apt_mirrors(release, sources)
    if not mirrors:
        own = debian_codename()
        mirrors = apt_mirrors(own, sources)
        if not mirrors:
            raise EngineUnavailable(f"no Debian mirror for {release!r} or {own!r} in {sources}/sources.list(.d); "
                                    "cannot debootstrap")
    return mirrors[0]


def debian_codename() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    raise EngineUnavailable("/etc/os-release names no VERSION_CODENAME: not a Debian machine")


# Debian's Python in the local base saves the image build its apt-get (the Dockerfile installs these
# packages when the base has no Python, as debian:bookworm-slim has not)
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")


def ensure_base_image(pull_tag: str, local_tag: str, release: str, pull_timeout_s: float = 30) -> str:
    """A base image tag that exists in the daemon: ``pull_tag`` when present or pullable, else
    ``local_tag``, built here with debootstrap (Debian ``release``, minbase plus :data:`BASE_PACKAGES`)
    from this machine's Debian mirror when it does not exist yet."""
    if image_exists(pull_tag):
        return pull_tag
    if image_exists(local_tag):
        return local_tag
    try:
        if _run(["docker", "pull", pull_tag], timeout=pull_timeout_s, check=False).returncode == 0:
            return pull_tag
    except subprocess.TimeoutExpired:
        pass
    mirror = debootstrap_mirror(release)
    if shutil.which("debootstrap") is None:
        _apt_install(["debootstrap"])
    with tempfile.TemporaryDirectory(prefix="molens-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", release, str(rootfs),
              mirror], timeout=900)
        # an image, not a machine: no package lists or downloaded packages, no logs
        for sub in ("var/lib/apt/lists", "var/cache/apt/archives", "var/log"):
            for p in (rootfs / sub).glob("*"):
                if p.is_file():
                    p.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(
            ["docker", "import", "--change", 'CMD ["bash"]', "-", local_tag],
            stdin=tar.stdout, capture_output=True, text=True, timeout=300,
        )
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait(60)
        if imp.returncode != 0 or tar.returncode != 0:
            raise EngineUnavailable(f"docker import of the debootstrapped {release} failed: {imp.stderr.strip()}")
    return local_tag


DEBIAN_RELEASE = "bookworm"
"""The Debian release of the image's default base (the Dockerfile's ``BASE``), pulled or debootstrapped."""
BASE_IMAGE = f"debian:{DEBIAN_RELEASE}-slim"
LOCAL_BASE_IMAGE = f"molens-base/debian-python:{DEBIAN_RELEASE}"


def extra_ca_certs() -> str:
    """The certificates this machine added to its trust store (``/usr/local/share/ca-certificates``,
    e.g. a TLS-intercepting proxy's), for the image build's ``EXTRA_CA_CERTS``; "" when none."""
    # joined as the shell's "$(cat /usr/local/share/ca-certificates/*.crt)" does: same build argument, same layer cache
    return "".join(p.read_text() for p in sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))).rstrip("\n")


DAEMON_PID = CACHE / "dockerd.pid"


def main(argv: list[str]) -> int:
    """``scripts/cluster up|down --docker``'s engine steps: ``up [BASE]`` installs what is missing, starts
    dockerd when no daemon answers (its pid in .cache/container/dockerd.pid) and prints the base image
    to build on: ``BASE`` as given (``$MOLENS_BASE_IMAGE``; the build pulls it), else the default one,
    pulled or debootstrapped; ``down`` stops the dockerd that ``up`` started, if any."""
    if argv[:1] == ["up"] and len(argv) <= 2:
        ensure_tools()
        daemon = Daemon.ensure()
        if daemon.proc is not None:
            DAEMON_PID.write_text(f"{daemon.proc.pid}\n")
            print(f"engine: started dockerd (pid {daemon.proc.pid}, log {CACHE / 'dockerd.log'})", file=sys.stderr)
        print(argv[1] if len(argv) == 2 and argv[1] else ensure_base_image(BASE_IMAGE, LOCAL_BASE_IMAGE, DEBIAN_RELEASE))
        return 0
    if argv == ["down"]:
        try:
            pid = int(DAEMON_PID.read_text())
        except (OSError, ValueError):
            return 0
        DAEMON_PID.unlink()
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "dockerd":
                return 0  # not ours any more: the pid was reused
            os.kill(pid, signal.SIGTERM)
        except (OSError, ProcessLookupError):
            return 0
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        print(f"engine: stopped dockerd (pid {pid})", file=sys.stderr)
        return 0
    print("usage: python -m tests.container.engine up [BASE] | down", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        raise SystemExit(main(sys.argv[1:]))
    except EngineUnavailable as exc:
        raise SystemExit(f"engine: {exc}") from None
