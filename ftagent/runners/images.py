"""The docker runner's tool image: build context, content-hashed tags, streamed builds.

One image, ``ftagent-tools:<flavour>-<hash>``, serves training, evaluation and data scripts -- the
Docker twin of the local runner's shared tool env (same pins, so a model saved by training always
loads in evaluation). It is built from ``docker/tools/Dockerfile`` with a context assembled here:

* ``envs/``: the flavour's torch file, ``tools.txt`` and ``tools.lock.txt`` from ``configs/envs/``
  (the one source of truth shared with ``ftagent env setup``);
* ``wheels/``: local torch/torchvision wheels of the pinned versions (e.g. the ``+cpu`` torch
  wheel), from ``FT_DOCKER_WHEELS_DIR`` or pip's ``find-links`` folders;
* ``certs/``: an extra CA bundle for TLS-intercepting proxies (``FT_DOCKER_CA_BUNDLE``, else the
  host bundle named by ``PIP_CERT`` / ``REQUESTS_CA_BUNDLE`` / ``SSL_CERT_FILE``);
* ``cpu_fix.py``: :func:`ftagent.runners.toolenv.cpu_fix_script`.

The tag's hash covers every context file (wheels by name and size, their names are versioned),
the build args and the base image name, so an unchanged Dockerfile is not rebuilt. Builds use the
classic builder through the Docker API (any engine); the log is streamed to a file and to callbacks,
and a failure names the step that failed.
"""

from __future__ import annotations

import configparser
import fcntl
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ftagent.core.errors import EnvironmentFailure
from ftagent.core.paths import config_file, docker_dir
from ftagent.runners.heartbeat import Heartbeat
from ftagent.runners.toolenv import TORCH_PIN, TORCHVISION_PIN, cpu_fix_script

Flavour = Literal["cpu", "gpu"]
IMAGE_REPO = "ftagent-tools"
PUBLIC_BASE_IMAGE = "python:3.11-slim-bookworm"
LOCAL_BASE_IMAGE = "ftagent-base:bookworm"  # built by docker/base/build-base.sh (no registry needed)
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
LABEL_HASH = "org.ftagent.content-hash"
_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "FTP_PROXY", "ALL_PROXY")
_PINNED_WHEELS = {"torch": TORCH_PIN.split("==")[1], "torchvision": TORCHVISION_PIN.split("==")[1]}


class ImageBuildError(EnvironmentFailure):
    """A build failed; the message names the failing step and the log file."""


class BuildStep(BaseModel):
    """The Dockerfile step the builder is on."""

    number: int
    total: int
    instruction: str


class ImageSpec(BaseModel):
    """Everything that determines the tool image (and so its tag)."""

    flavour: Flavour = "cpu"
    base_image: str = PUBLIC_BASE_IMAGE
    wheels: list[Path] = Field(default_factory=list)
    ca_bundle: Path | None = None
    pip_index_url: str | None = None
    pip_extra_index_url: str | None = None
    proxies: dict[str, str] = Field(default_factory=dict)  # HTTP(S)_PROXY/NO_PROXY: passed, not hashed
    dockerfile_dir: Path = Field(default_factory=lambda: docker_dir() / "tools")
    envs_dir: Path = Field(default_factory=lambda: config_file("envs"))

    def build_args(self) -> dict[str, str]:
        """The ``--build-arg`` values (only the ones that are set)."""
        has_cpu_wheel = any(w.name.startswith("torch-") and "+cpu" in w.name for w in self.wheels)
        args = {"BASE_IMAGE": self.base_image, "FLAVOUR": self.flavour,
                "TORCH_PINS": f"{TORCH_PIN} {TORCHVISION_PIN}",
                "TORCH_EXTRA_INDEX_URL": TORCH_CPU_INDEX if self.flavour == "cpu" and not has_cpu_wheel else ""}
        if self.pip_index_url:
            args["PIP_INDEX_URL"] = self.pip_index_url
        if self.pip_extra_index_url:
            args["PIP_EXTRA_INDEX_URL"] = self.pip_extra_index_url
        return args

    def engine_build_args(self) -> dict[str, str]:
        """:meth:`build_args` plus the proxy variables (Docker's predefined args, not part of the tag)."""
        return {**self.build_args(), **self.proxies}

    def context_files(self) -> dict[str, Path | str]:
        """Build-context path -> host file (or text), in a stable order."""
        torch_file = "torch-gpu.txt" if self.flavour == "gpu" else "torch-cpu.txt"
        files: dict[str, Path | str] = {
            "Dockerfile": self.dockerfile_dir / "Dockerfile",
            "envs/torch.txt": self.envs_dir / torch_file,
            "envs/tools.txt": self.envs_dir / "tools.txt",
            "envs/tools.lock.txt": self.envs_dir / "tools.lock.txt",
            # the GPU tool env's additions (DeepSpeed, bitsandbytes); nothing for the CPU flavour
            "envs/tools-extra.txt": self.envs_dir / "tools-gpu.txt" if self.flavour == "gpu" else "",
            "cpu_fix.py": cpu_fix_script(),
            "wheels/.keep": "", "certs/.keep": "",
        }
        for wheel in sorted(self.wheels, key=lambda p: p.name):
            files[f"wheels/{wheel.name}"] = wheel
        if self.ca_bundle is not None:
            files["certs/extra.crt"] = self.ca_bundle
        return files

    def content_hash(self) -> str:
        """sha256 over the context files, the build args and the base image name."""
        h = hashlib.sha256()
        for key, value in sorted(self.build_args().items()):
            h.update(f"arg {key}={value}\n".encode())
        for rel, src in self.context_files().items():
            h.update(f"file {rel}\n".encode())
            if isinstance(src, str):
                h.update(src.encode())
            elif rel.startswith("wheels/"):
                h.update(f"{src.stat().st_size}".encode())  # wheel names are versioned; skip 100s of MB
            else:
                h.update(Path(src).read_bytes())
        return h.hexdigest()

    @property
    def tag(self) -> str:
        """``ftagent-tools:<flavour>-<first 12 hex digits of the content hash>``."""
        return f"{IMAGE_REPO}:{self.flavour}-{self.content_hash()[:12]}"

    @property
    def alias(self) -> str:
        """The moving tag of the flavour's latest build (``ftagent-tools:cpu``)."""
        return f"{IMAGE_REPO}:{self.flavour}"


class BuildResult(BaseModel):
    """What :func:`build_image` did."""

    tag: str
    image_id: str
    size_bytes: int
    duration_s: float
    skipped: bool
    log_file: Path | None = None


# -- discovering wheels, CA bundles and the base image ----------------------------------------------
def pip_find_links(environ: dict[str, str] | None = None) -> list[Path]:
    """Local folders in pip's ``find-links`` (``PIP_FIND_LINKS`` and the pip config files)."""
    environ = dict(os.environ) if environ is None else environ
    values = [environ.get("PIP_FIND_LINKS", "")]
    home = Path(environ.get("HOME", str(Path.home())))
    configs = [Path("/etc/pip.conf"), Path("/etc/xdg/pip/pip.conf"), home / ".config/pip/pip.conf",
               home / ".pip/pip.conf"]
    if environ.get("PIP_CONFIG_FILE"):
        configs.append(Path(environ["PIP_CONFIG_FILE"]))
    for cfg in configs:
        parser = configparser.ConfigParser()
        try:
            parser.read(cfg)
        except (configparser.Error, OSError):
            continue
        values.append(parser.get("global", "find-links", fallback=""))
    dirs: list[Path] = []
    for item in " ".join(values).split():
        path = Path(item.removeprefix("file://"))
        if "://" not in item.removeprefix("file://") and path.is_dir() and path not in dirs:
            dirs.append(path)
    return dirs


def select_wheels(folders: list[Path], flavour: Flavour) -> list[Path]:
    """The pinned torch/torchvision wheels for CPython 3.11 on Linux x86_64 in ``folders``.

    ``+cpu`` wheels are kept for the CPU flavour only (a GPU image must get the CUDA build).
    """
    found: dict[str, Path] = {}
    for folder in folders:
        for wheel in sorted(Path(folder).glob("*.whl")):
            name, _, rest = wheel.name.partition("-")
            version = rest.split("-", 1)[0]
            if name not in _PINNED_WHEELS or version.split("+")[0] != _PINNED_WHEELS[name]:
                continue
            if "cp311" not in wheel.name or "x86_64" not in wheel.name:
                continue
            if ("+cpu" in version) != (flavour == "cpu") and "+" in version:
                continue
            found.setdefault(wheel.name, wheel)
    return list(found.values())


def host_ca_bundle(environ: dict[str, str] | None = None) -> Path | None:
    """The host's CA bundle when one is configured (``PIP_CERT``, ``REQUESTS_CA_BUNDLE``, ``SSL_CERT_FILE``)."""
    environ = dict(os.environ) if environ is None else environ
    for key in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        value = environ.get(key)
        if value and Path(value).is_file():
            return Path(value)
    return None


def resolve_base_image(configured: str | None, client=None) -> str:
    """``FT_DOCKER_BASE_IMAGE``, else the local debootstrap image when the engine has it, else the public one."""
    if configured:
        return configured
    if client is not None and image_exists(client, LOCAL_BASE_IMAGE):
        return LOCAL_BASE_IMAGE
    return PUBLIC_BASE_IMAGE


def spec_from_settings(settings, *, flavour: Flavour, base_image: str | None = None, client=None) -> ImageSpec:
    """The image spec of these settings (``settings.ft.docker_*``) and this machine's pip setup."""
    ft = settings.ft
    wheel_dirs = [Path(ft.docker_wheels_dir)] if ft.docker_wheels_dir else pip_find_links()
    ca = Path(ft.docker_ca_bundle) if ft.docker_ca_bundle else host_ca_bundle()
    return ImageSpec(flavour=flavour, base_image=resolve_base_image(base_image or ft.docker_base_image, client),
                     wheels=select_wheels(wheel_dirs, flavour), ca_bundle=ca,
                     pip_index_url=os.environ.get("PIP_INDEX_URL") or None,
                     pip_extra_index_url=_remote_urls(os.environ.get("PIP_EXTRA_INDEX_URL", "")),
                     proxies={k: v for k, v in os.environ.items() if k.upper() in _PROXY_VARS and v})


def _remote_urls(value: str) -> str | None:
    """Only the http(s) URLs of a pip index list (``file://`` indexes do not exist in a container)."""
    urls = [u for u in value.split() if u.startswith(("http://", "https://"))]
    return " ".join(urls) or None


# -- engine helpers -----------------------------------------------------------------------------------
def image_exists(client, tag: str) -> bool:
    """True when the engine has ``tag``."""
    import docker

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def tool_images(client) -> list[dict[str, str | int]]:
    """The ``ftagent-tools`` images the engine has: tags, id, size, content hash label."""
    out = []
    for image in client.images.list(name=IMAGE_REPO):
        labels = image.labels or {}
        out.append({"tags": ", ".join(image.tags), "id": image.short_id, "size_bytes": int(image.attrs.get("Size", 0)),
                    "hash": labels.get(LABEL_HASH, "")})
    return out


def describe_images(client, spec: ImageSpec) -> str:
    """One line for ``ftagent doctor``: the current tag, whether the engine has it, stale builds."""
    current = spec.tag
    present = tool_images(client)
    have = [i for i in present if current in str(i["tags"]).split(", ")]
    stale = [str(i["tags"]) for i in present if i not in have and f":{spec.flavour}-" in str(i["tags"])]
    if have:
        text = f"{current} present and current ({int(have[0]['size_bytes']) / 1e9:.1f} GB, base {spec.base_image})"
    else:
        text = f"{current} missing: run `ftagent env build-images` (base {spec.base_image})"
    if stale:
        text += f"; stale: {', '.join(stale)}"
    return text


def assemble_context(spec: ImageSpec, dest: Path) -> Path:
    """Write the build context of ``spec`` into ``dest`` (wheels are hard-linked when possible)."""
    dest = Path(dest)
    for rel, src in spec.context_files().items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(src, str):
            target.write_text(src, encoding="utf-8")
            continue
        if not Path(src).is_file():
            raise ImageBuildError(f"build context file {src} does not exist")
        try:
            os.link(src, target)
        except OSError:
            shutil.copyfile(src, target)
    return dest


def parse_step(line: str) -> BuildStep | None:
    """The step header of the classic builder (``Step 3/12 : RUN ...``), else None."""
    match = _STEP.match(line.strip())
    if not match:
        return None
    return BuildStep(number=int(match[1]), total=int(match[2]), instruction=match[3][:200])


def build_image(
    client,
    spec: ImageSpec,
    *,
    force: bool = False,
    network_mode: str | None = "host",
    log_file: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    on_step: Callable[[BuildStep], None] | None = None,
    on_heartbeat: Callable[[str], None] | None = None,
) -> BuildResult:
    """Build the image of ``spec`` unless the engine already has its tag.

    Args:
        client: a docker client (``docker.from_env()``).
        spec: what to build.
        force: build even when the tag exists (the layer cache still applies).
        network_mode: the build containers' network (``host`` reaches a proxy or PyPI on loopback).
        log_file: the full build log (appended).
        on_line: called with every log line as it arrives.
        on_step: called when the builder starts a Dockerfile step.
        on_heartbeat: called at least every 10 s while the build prints nothing (a quiet ``RUN pip
            install`` takes minutes), with the elapsed time and the current step.

    Raises:
        ImageBuildError: the build failed (the message names the step and the log file).
    """
    start = time.monotonic()
    tag = spec.tag
    if not force and image_exists(client, tag):
        return _present(client, tag, start, log_file)
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    lock_path = Path(tempfile.gettempdir()) / f"ftagent-build-{tag.replace(':', '-')}.lock"
    with open(lock_path, "w") as lock:  # one build of a tag at a time on this machine
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and image_exists(client, tag):  # another process built it while we waited
            return _present(client, tag, start, log_file)
        with tempfile.TemporaryDirectory(prefix="ftagent-image-") as tmp:
            context = assemble_context(spec, Path(tmp))
            stream = client.api.build(path=str(context), tag=tag, buildargs=spec.engine_build_args(), rm=True,
                                      forcerm=True, decode=True, network_mode=network_mode, pull=False,
                                      labels={LABEL_HASH: spec.content_hash(), "org.ftagent.flavour": spec.flavour,
                                              "org.ftagent.base-image": spec.base_image})
            with Heartbeat(f"building {tag}", on_heartbeat or (lambda _m: None)) as beat:
                # lines the caller shows count as signs of life; unshown ones only feed the beat's detail
                image_id = _consume(stream, spec, log_file, on_line or (lambda _l: None),
                                    on_step or (lambda _s: None), beat.touch if on_line else beat.note)
        client.api.tag(image_id, IMAGE_REPO, spec.alias.split(":")[1])
    image = client.images.get(tag)
    return BuildResult(tag=tag, image_id=image_id, size_bytes=int(image.attrs.get("Size", 0)),
                       duration_s=time.monotonic() - start, skipped=False, log_file=log_file)


def _present(client, tag: str, start: float, log_file: Path | None) -> BuildResult:
    image = client.images.get(tag)
    return BuildResult(tag=tag, image_id=image.id, size_bytes=int(image.attrs.get("Size", 0)),
                       duration_s=time.monotonic() - start, skipped=True, log_file=log_file)


def _consume(stream, spec: ImageSpec, log_file: Path | None, on_line, on_step, touch=lambda _d: None) -> str:
    """Follow the build stream; return the image id or raise naming the failing step."""
    step: BuildStep | None = None
    tail: list[str] = []
    image_id = ""
    fh = open(log_file, "a", encoding="utf-8") if log_file else None  # noqa: SIM115 - closed below
    try:
        for chunk in stream:
            if "error" in chunk:
                _fail(spec, step, str(chunk.get("error", "")).strip(), tail, log_file)
            if "aux" in chunk and isinstance(chunk["aux"], dict):
                image_id = chunk["aux"].get("ID", image_id)
            text = chunk.get("stream") or (chunk.get("status", "") + " " + chunk.get("progress", "")).strip()
            for line in _ANSI.sub("", str(text)).splitlines():
                if not line.strip():
                    continue
                if fh:
                    fh.write(line + "\n")
                    fh.flush()
                tail = [*tail[-39:], line]
                found = parse_step(line)
                if found:
                    step = found
                    on_step(found)
                touch(f"step {step.number}/{step.total}: {step.instruction[:60]} — {line.strip()[:80]}"
                      if step else line.strip()[:80])
                on_line(line)
    finally:
        if fh:
            fh.close()
    if not image_id:
        _fail(spec, step, "the build stream ended without an image id", tail, log_file)
    return image_id


def _fail(spec: ImageSpec, step: BuildStep | None, error: str, tail: list[str], log_file: Path | None) -> None:
    where = f"step {step.number}/{step.total} ({step.instruction[:120]})" if step else "before the first step"
    hint = ""
    if step is None or step.instruction.upper().startswith("FROM"):
        hint = (f"\nThe base image {spec.base_image} is not available: pull it, or build a local one without "
                f"any registry with docker/base/build-base.sh and use --base-image {LOCAL_BASE_IMAGE}.")
    log = f" (log: {log_file})" if log_file else ""
    raise ImageBuildError(f"building {spec.tag} failed at {where}: {error}{log}{hint}\n" + "\n".join(tail[-15:]))
