"""What the compose tests need on the host, set up the way a Debian machine without an image
registry allows: a Docker engine and a compose command (Debian packages), a running ``dockerd``,
a Python base image, an etcd base image (the cluster file), and wheels for an offline image
build.

Each step either works or raises ``StepFailed`` naming the step and why, with the command's
output. ``Unprovisionable`` means the machine can do none of it (no root and no package
manager), the one case the test skips. Nothing here reaches beyond this machine except apt
and pip, which use the mirror and index the host is already configured with.

Kept between runs (documented in README "Docker"): the installed packages, the base images
``shoal-python-base:bookworm`` and ``shoal-etcd-base:bookworm`` and the wheels in
``docker/wheels/``. Everything else a step
starts is stopped by its owner (``DockerDaemon.stop``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / "docker" / "wheels"

BASE_IMAGE = "shoal-python-base:bookworm"
BASE_SUITE = "bookworm"
# Bump when the recipe below changes: a cached base image with another value is rebuilt.
BASE_RECIPE = "1"
BASE_RECIPE_LABEL = "io.shoal.base-recipe"
BASE_PACKAGES = ("python3", "python3-venv")
# docker-compose.cluster.yml's etcd image (docker/etcd.Dockerfile) is built on ETCD_BASE_IMAGE;
# where that cannot be pulled, on this one: Debian with etcd-server and etcd-client installed.
ETCD_BASE_DEFAULT = "debian:bookworm-slim"
ETCD_BASE_IMAGE = "shoal-etcd-base:bookworm"
ETCD_BASE_PACKAGES = ("etcd-server", "etcd-client")
# Not needed by a Python service; dropped to keep the broker image small.
BASE_TRIM = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
             "usr/lib/x86_64-linux-gnu/gconv", "usr/lib/aarch64-linux-gnu/gconv",
             "var/lib/apt/lists", "var/cache/apt", "var/log")


class StepFailed(Exception):
    """A provisioning or test step that cannot work here; the message says which and why."""

    def __init__(self, step: str, why: str) -> None:
        super().__init__(f"step '{step}' failed: {why}")
        self.step = step


class Unprovisionable(Exception):
    """No root and no package manager: nothing can be installed or started."""


def _tail(text: str | bytes | None, limit: int = 3000) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def run(step: str, args: Sequence[str], timeout: float, *, check: bool = True,
        env: dict[str, str] | None = None, cwd: Path | None = None,
        stdin: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command for ``step``; a missing program, a timeout or (with check) a non-zero exit
    raises StepFailed with the command and the tail of its output.

    Raises:
        StepFailed: as above.
    """
    command = " ".join(args)
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                              env=None if env is None else {**os.environ, **env}, cwd=cwd,
                              stdin=stdin if stdin is not None else subprocess.DEVNULL)
    except FileNotFoundError:
        raise StepFailed(step, f"{args[0]} is not installed (ran: {command})") from None
    except subprocess.TimeoutExpired as exc:
        raise StepFailed(step, f"no result after {timeout:.0f} s (ran: {command})\n"
                               f"{_tail(exc.stdout)}\n{_tail(exc.stderr)}") from None
    if check and done.returncode != 0:
        raise StepFailed(step, f"exit status {done.returncode} (ran: {command})\n"
                               f"{_tail(done.stdout)}\n{_tail(done.stderr)}")
    return done


# ------------------------------------------------------------------------------ privileges


def privilege() -> list[str] | None:
    """The prefix that runs a command as root: [] when root, ``sudo -n`` when that works
    without a password, None when neither."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True,
                                               timeout=10).returncode == 0:
        return ["sudo", "-n"]
    return None


def as_root(step: str, why: str) -> list[str]:
    """The root prefix for ``step``.

    Raises:
        Unprovisionable: no root and no apt-get (the caller skips).
        StepFailed: no root, though the machine has a package manager.
    """
    prefix = privilege()
    if prefix is not None:
        return prefix
    if shutil.which("apt-get") is None:
        raise Unprovisionable(f"{step}: {why}, and this machine has neither root (nor "
                              "password-less sudo) nor apt-get")
    raise StepFailed(step, f"{why}, which needs root; run as root or with password-less sudo")


# ------------------------------------------------------------------------------ packages


_apt_updated = False


def apt_install(step: str, packages: Sequence[str]) -> None:
    """Install Debian packages (without recommends), refreshing the lists once per run.

    Raises:
        StepFailed, Unprovisionable: see ``run`` and ``as_root``.
    """
    global _apt_updated
    if shutil.which("apt-get") is None:
        raise StepFailed(step, f"{', '.join(packages)} missing and there is no apt-get to "
                               "install them")
    root = as_root(step, f"{', '.join(packages)} must be installed")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    wait = ["-o", "DPkg::Lock::Timeout=300"]  # another apt run may hold the lock for a while
    if not _apt_updated:
        run(step, [*root, "apt-get", *wait, "update", "-qq"], timeout=600, env=env)
        _apt_updated = True
    run(step, [*root, "apt-get", *wait, "install", "-y", "-qq", "--no-install-recommends",
               *packages], timeout=1200, env=env)


def apt_candidate(package: str) -> bool:
    """True when apt knows an installable version of ``package``."""
    if shutil.which("apt-cache") is None:
        return False
    done = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True,
                          timeout=60)
    match = re.search(r"Candidate:\s*(\S+)", done.stdout)
    return bool(match) and match.group(1) != "(none)"


def ensure_docker_packages() -> None:
    """The docker client and dockerd: Debian's docker.io when either is missing.

    Raises:
        StepFailed, Unprovisionable.
    """
    if shutil.which("docker") and (shutil.which("dockerd") or _daemon_answers()):
        return
    apt_install("install Docker (Debian package docker.io)", ["docker.io"])


def compose_command() -> list[str]:
    """``docker compose`` (the plugin) or ``docker-compose``, installing one when neither
    exists: the plugin when apt offers it (Docker's own repository), else Debian's
    docker-compose.

    Raises:
        StepFailed, Unprovisionable.
    """
    found = _existing_compose()
    if found:
        return found
    package = ("docker-compose-plugin" if apt_candidate("docker-compose-plugin")
               else "docker-compose")
    apt_install(f"install a compose command (Debian package {package})", [package])
    found = _existing_compose()
    if not found:
        raise StepFailed("install a compose command",
                         f"{package} installed, yet neither 'docker compose' nor "
                         "'docker-compose' answers 'version'")
    return found


def _existing_compose() -> list[str] | None:
    if subprocess.run(["docker", "compose", "version"], capture_output=True,
                      timeout=30).returncode == 0:
        return ["docker", "compose"]
    legacy = shutil.which("docker-compose")
    if legacy and subprocess.run([legacy, "version"], capture_output=True,
                                 timeout=30).returncode == 0:
        return [legacy]
    return None


# ------------------------------------------------------------------------------ daemon


def _daemon_answers() -> bool:
    try:
        return subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                              capture_output=True, timeout=20).returncode == 0
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False


@dataclass
class DockerDaemon:
    """A dockerd this run started (``process`` set) or one that was already running."""

    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @classmethod
    def ensure(cls, log_dir: Path, timeout: float = 90.0) -> DockerDaemon:
        """Use the running daemon, or start dockerd (as root) and wait until it answers.

        Raises:
            StepFailed, Unprovisionable.
        """
        step = "start dockerd"
        if _daemon_answers():
            return cls()
        socket = Path("/var/run/docker.sock")
        if socket.exists() and os.geteuid() != 0 and not os.access(socket, os.R_OK | os.W_OK):
            raise StepFailed("reach the Docker daemon",
                             f"{socket} exists but this user may not use it; run as root or "
                             "as a member of the docker group")
        root = as_root(step, "no Docker daemon is running")
        dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
        log_path = log_dir / "dockerd.log"
        log = open(log_path, "ab")
        try:
            # Its own session, so a Ctrl-C of the test run reaches it only through stop().
            process = subprocess.Popen([*root, dockerd], stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        except OSError as exc:
            raise StepFailed(step, f"cannot run {dockerd}: {exc}") from None
        finally:
            log.close()
        daemon = cls(process, log_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise StepFailed(step, f"dockerd exited with status {process.returncode}; its "
                                       f"log ({log_path}):\n{daemon.log_tail()}")
            if _daemon_answers():
                return daemon
            time.sleep(0.5)
        daemon.stop()
        raise StepFailed(step, f"dockerd did not answer within {timeout:.0f} s; its log "
                               f"({log_path}):\n{daemon.log_tail()}")

    def log_tail(self) -> str:
        try:
            return _tail(self.log_path.read_text(errors="replace")) if self.log_path else ""
        except OSError:
            return ""

    def stop(self, timeout: float = 60.0) -> None:
        """Stop dockerd if this run started it (SIGTERM, then SIGKILL after ``timeout``)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


# ------------------------------------------------------------------------------ images


def image_exists(name: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", name], capture_output=True,
                          timeout=30).returncode == 0


def ensure_python_image(configured: str, work_dir: Path) -> str:
    """The base image for the build: ``configured`` when present or pullable, else the Debian
    base image (built once, then reused).

    Raises:
        StepFailed, Unprovisionable.
    """
    if image_exists(configured):
        return configured
    try:
        pulled = subprocess.run(["docker", "pull", "--quiet", configured], capture_output=True,
                                text=True, timeout=120)
        if pulled.returncode == 0:
            return configured
        why = _tail(pulled.stderr, 300)
    except subprocess.TimeoutExpired:
        why = "no answer from the registry within 120 s"
    if _base_recipe(BASE_IMAGE) != BASE_RECIPE:
        build_base_image(work_dir, reason=f"{configured} cannot be pulled ({why})")
    return BASE_IMAGE


def ensure_etcd_base_image(configured: str, work_dir: Path) -> str:
    """The base image of the etcd image: ``configured`` when present or pullable (the etcd
    Dockerfile then installs etcd-server with apt), else a Debian image with etcd-server
    already in it (built once with debootstrap, then reused).

    Raises:
        StepFailed, Unprovisionable.
    """
    if image_exists(configured):
        return configured
    try:
        pulled = subprocess.run(["docker", "pull", "--quiet", configured], capture_output=True,
                                text=True, timeout=120)
        if pulled.returncode == 0:
            return configured
        why = _tail(pulled.stderr, 300)
    except subprocess.TimeoutExpired:
        why = "no answer from the registry within 120 s"
    if _base_recipe(ETCD_BASE_IMAGE) != BASE_RECIPE:
        build_base_image(work_dir, reason=f"{configured} cannot be pulled ({why})",
                         image=ETCD_BASE_IMAGE, packages=ETCD_BASE_PACKAGES)
    return ETCD_BASE_IMAGE


def _base_recipe(image: str) -> str | None:
    done = subprocess.run(["docker", "image", "inspect", "--format",
                           f'{{{{index .Config.Labels "{BASE_RECIPE_LABEL}"}}}}', image],
                          capture_output=True, text=True, timeout=30)
    return done.stdout.strip() if done.returncode == 0 else None


def debian_mirror() -> str:
    """The Debian archive apt uses on this host (``$SHOAL_DEBIAN_MIRROR`` first).

    Raises:
        StepFailed: no Debian archive in /etc/apt/sources.list*.
    """
    if os.environ.get("SHOAL_DEBIAN_MIRROR"):
        return os.environ["SHOAL_DEBIAN_MIRROR"]
    for uri, suites in _apt_sources():
        if "security" in uri or not any(s == s.split("-")[0] for s in suites):
            continue
        if uri.startswith(("http://", "https://")) and "debian" in uri:
            return uri
    raise StepFailed("build the Python base image",
                     "no Debian archive found in /etc/apt/sources.list*; set "
                     "SHOAL_DEBIAN_MIRROR to one (http://.../debian)")


def _apt_sources() -> list[tuple[str, list[str]]]:
    """(URI, suites) of each enabled deb source, one-line and deb822 formats."""
    found: list[tuple[str, list[str]]] = []
    apt = Path("/etc/apt")
    files = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list")),
             *sorted((apt / "sources.list.d").glob("*.sources"))]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M))
                if "deb" in fields.get("Types", "").split() and \
                        fields.get("Enabled", "yes") != "no":
                    found += [(u, fields.get("Suites", "").split())
                              for u in fields.get("URIs", "").split()]
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
                if len(words) >= 3 and words[0] == "deb":
                    found.append((words[1], [words[2]]))
    return found


def build_base_image(work_dir: Path, reason: str, image: str = BASE_IMAGE,
                     packages: Sequence[str] = BASE_PACKAGES) -> None:
    """debootstrap a minimal Debian with ``packages`` (python3 + venv by default), trim it and
    ``docker import`` it as ``image``.

    Raises:
        StepFailed, Unprovisionable.
    """
    step = f"build the base image {image}"
    why = f"{reason}; the fallback base image {image} is built with debootstrap"
    root = as_root(step, why)
    if shutil.which("debootstrap") is None and not Path("/usr/sbin/debootstrap").exists():
        apt_install(f"{step} (install debootstrap)", ["debootstrap"])
    mirror = debian_mirror()
    # Not under /tmp, which may be a nodev or noexec tmpfs where debootstrap cannot work.
    parent = Path("/var/tmp") if Path("/var/tmp").is_dir() else work_dir
    rootfs = Path(tempfile.mkdtemp(prefix="shoal-rootfs-", dir=parent))
    try:
        run(step, [*root, "debootstrap", "--variant=minbase",
                   f"--include={','.join(packages)}", BASE_SUITE, str(rootfs), mirror],
            timeout=1200)
        trim = [str(rootfs / p) for p in BASE_TRIM if (rootfs / p).is_dir()]
        run(step, [*root, "find", *trim, "-mindepth", "1", "-delete"], timeout=120)
        tar = subprocess.Popen([*root, "tar", "--numeric-owner", "-C", str(rootfs), "-c", "."],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            run(step, ["docker", "import",
                       "--change", "ENV LANG=C.UTF-8",
                       "--change", 'CMD ["python3"]',
                       "--change", f"LABEL {BASE_RECIPE_LABEL}={BASE_RECIPE}",
                       "--message", f"debootstrap {BASE_SUITE} + {' '.join(packages)}",
                       "-", image], timeout=600, stdin=tar.stdout)  # type: ignore[arg-type]
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            tar_err = tar.communicate(timeout=600)[1]
        if tar.returncode != 0:
            raise StepFailed(step, f"tar of the root file system failed: {_tail(tar_err)}")
    finally:
        _remove_rootfs(root, rootfs)


def _remove_rootfs(root: list[str], rootfs: Path) -> None:
    # A debootstrap that failed half way may leave /proc or /sys mounted in the tree; unmount
    # those before deleting, and leave the tree alone if any mount stays.
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
              if line.split()[1].startswith(str(rootfs) + "/")]
    for mount in sorted(mounts, reverse=True):
        subprocess.run([*root, "umount", "-l", mount], capture_output=True, timeout=60)
    if any(line.split()[1].startswith(str(rootfs) + "/")
           for line in Path("/proc/mounts").read_text().splitlines()):
        print(f"warning: {rootfs} still has mounts; left in place", file=sys.stderr)
        return
    subprocess.run([*root, "rm", "-rf", "--one-file-system", str(rootfs)], capture_output=True,
                   timeout=300)


# ------------------------------------------------------------------------------ wheels


@dataclass(frozen=True)
class ImagePython:
    version: str  # "3.11"
    machine: str  # "x86_64"
    glibc: str  # "2.36", "" for another C library

    def platforms(self) -> list[str]:
        """Every manylinux tag this glibc accepts; pip matches --platform exactly."""
        if not self.glibc:
            return []
        major, minor = (int(x) for x in self.glibc.split(".")[:2])
        tags = [f"manylinux_{major}_{m}_{self.machine}" for m in range(5, minor + 1)]
        legacy = {5: "manylinux1", 12: "manylinux2010", 17: "manylinux2014"}
        tags += [f"{name}_{self.machine}" for m, name in legacy.items() if m <= minor]
        return tags


def image_python(image: str) -> ImagePython:
    """The Python version, machine and glibc of ``image`` (run without a network).

    Raises:
        StepFailed.
    """
    probe = ("import json, platform, sys; print(json.dumps([f'{sys.version_info[0]}."
             "{sys.version_info[1]}', platform.machine(), platform.libc_ver()]))")
    done = run("inspect the base image's Python",
               ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", image,
                "-c", probe], timeout=120)
    version, machine, (libc, libc_version) = json.loads(done.stdout.strip().splitlines()[-1])
    return ImagePython(version, machine, libc_version if libc == "glibc" else "")


def image_requirements() -> list[str]:
    """What the image build installs: the build backend, the broker's dependencies and the
    examples' requirements."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    examples = (ROOT / "docker" / "examples" / "requirements.txt").read_text().splitlines()
    return [*project["build-system"]["requires"], *project["project"]["dependencies"],
            *project["project"]["optional-dependencies"]["cluster"],
            *(line.strip() for line in examples if line.strip() and not line.startswith("#"))]


def prepare_wheels(image: str, dest: Path = WHEELS) -> list[str]:
    """Download wheels for ``image``'s Python and platform into ``dest`` (the build context),
    so the image builds with PIP_NO_INDEX. Returns the wheel file names.

    Raises:
        StepFailed.
    """
    step = "download wheels for the image build"
    target = image_python(image)
    if not target.glibc:
        raise StepFailed(step, f"{image} has no glibc; only glibc base images are supported "
                               "for offline builds")
    abi = "cp" + target.version.replace(".", "")
    platforms = [arg for tag in target.platforms() for arg in ("--platform", tag)]
    run(step, [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
               "--dest", str(dest), "--only-binary=:all:", "--python-version", target.version,
               "--implementation", "cp", "--abi", abi, *platforms, *image_requirements()],
        timeout=600)
    return sorted(p.name for p in dest.glob("*.whl"))
