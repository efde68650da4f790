"""Tool image spec: content-hashed tags, wheel/CA discovery, build context, streamed build errors."""

from __future__ import annotations

from pathlib import Path

import pytest

import docker
from ftagent.core.paths import config_file, docker_dir
from ftagent.core.settings import load_settings
from ftagent.runners import images
from ftagent.runners.images import (
    ImageBuildError,
    ImageSpec,
    assemble_context,
    build_image,
    parse_step,
    pip_find_links,
    select_wheels,
    spec_from_settings,
)

CPU_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
CUDA_WHEEL = "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"


def _copy_inputs(tmp_path: Path) -> tuple[Path, Path]:
    """Private copies of the Dockerfile folder and configs/envs, so a test may edit them."""
    dfile, envs = tmp_path / "docker", tmp_path / "envs"
    dfile.mkdir()
    envs.mkdir()
    (dfile / "Dockerfile").write_bytes((docker_dir() / "tools" / "Dockerfile").read_bytes())
    for name in ("torch-cpu.txt", "torch-gpu.txt", "tools.txt", "tools.lock.txt", "tools-gpu.txt"):
        (envs / name).write_bytes(config_file("envs", name).read_bytes())
    return dfile, envs


def test_tag_is_a_content_hash(tmp_path: Path) -> None:
    dfile, envs = _copy_inputs(tmp_path)
    spec = ImageSpec(dockerfile_dir=dfile, envs_dir=envs)
    tag = spec.tag
    assert tag.startswith("ftagent-tools:cpu-") and len(tag.split("-")[-1]) == 12
    assert ImageSpec(dockerfile_dir=dfile, envs_dir=envs).tag == tag  # stable
    assert spec.alias == "ftagent-tools:cpu"
    # every input changes the tag: Dockerfile, pins, flavour, base image, CA bundle, wheels
    (dfile / "Dockerfile").write_text((dfile / "Dockerfile").read_text() + "\n# edited\n")
    edited = ImageSpec(dockerfile_dir=dfile, envs_dir=envs).tag
    assert edited != tag
    (envs / "tools.lock.txt").write_text((envs / "tools.lock.txt").read_text().replace("peft==0.18.1", "peft==0.18.2"))
    pinned = ImageSpec(dockerfile_dir=dfile, envs_dir=envs).tag
    assert pinned != edited
    others = {ImageSpec(dockerfile_dir=dfile, envs_dir=envs, flavour="gpu").tag,
              ImageSpec(dockerfile_dir=dfile, envs_dir=envs, base_image="ftagent-base:bookworm").tag}
    ca = tmp_path / "proxy.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    others.add(ImageSpec(dockerfile_dir=dfile, envs_dir=envs, ca_bundle=ca).tag)
    wheel = tmp_path / CPU_WHEEL
    wheel.write_bytes(b"x" * 10)
    others.add(ImageSpec(dockerfile_dir=dfile, envs_dir=envs, wheels=[wheel]).tag)
    assert len(others) == 4 and pinned not in others
    # the CPU torch step uses the PyTorch CPU index only when no local +cpu wheel is there
    assert ImageSpec(dockerfile_dir=dfile, envs_dir=envs).build_args()["TORCH_EXTRA_INDEX_URL"] == images.TORCH_CPU_INDEX
    assert ImageSpec(dockerfile_dir=dfile, envs_dir=envs, wheels=[wheel]).build_args()["TORCH_EXTRA_INDEX_URL"] == ""
    assert ImageSpec(dockerfile_dir=dfile, envs_dir=envs, flavour="gpu").build_args()["TORCH_EXTRA_INDEX_URL"] == ""


def test_build_args_carry_the_toolenv_pins() -> None:
    from ftagent.runners.toolenv import TORCH_PIN, TORCHVISION_PIN

    args = ImageSpec(flavour="gpu", pip_index_url="https://proxy.example/simple").build_args()
    assert args["TORCH_PINS"] == f"{TORCH_PIN} {TORCHVISION_PIN}" and args["FLAVOUR"] == "gpu"
    assert args["PIP_INDEX_URL"] == "https://proxy.example/simple" and "PIP_EXTRA_INDEX_URL" not in args


def test_wheel_selection_by_pin_and_flavour(tmp_path: Path) -> None:
    names = [CPU_WHEEL, CUDA_WHEEL, "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
             "torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl", "numpy-1.26.4-cp311-cp311-manylinux.whl",
             "torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    cpu = sorted(w.name for w in select_wheels([tmp_path], "cpu"))
    gpu = sorted(w.name for w in select_wheels([tmp_path], "gpu"))
    assert cpu == [CPU_WHEEL, CUDA_WHEEL, "torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl"]
    assert gpu == [CUDA_WHEEL, "torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl"]  # never a +cpu torch


def test_find_links_from_env_and_pip_config(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    cfg = tmp_path / "pip.conf"
    cfg.write_text(f"[global]\nfind-links = file://{b} https://example.org/wheels\n")
    found = pip_find_links({"PIP_FIND_LINKS": f"{a} {tmp_path / 'missing'}", "PIP_CONFIG_FILE": str(cfg),
                            "HOME": str(tmp_path)})
    assert a in found and b in found and tmp_path / "missing" not in found
    assert all("://" not in str(p) for p in found)


def test_spec_from_settings_uses_the_configured_folders(tmp_path: Path, monkeypatch) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / CPU_WHEEL).write_bytes(b"")
    ca = tmp_path / "ca.crt"
    ca.write_text("pem")
    monkeypatch.setenv("FT_DOCKER_WHEELS_DIR", str(wheels))
    monkeypatch.setenv("FT_DOCKER_CA_BUNDLE", str(ca))
    monkeypatch.setenv("FT_DOCKER_BASE_IMAGE", "debian-py311:local")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///opt/pypi/simple https://mirror.example/simple")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    spec = spec_from_settings(load_settings(), flavour="cpu")
    assert spec.engine_build_args()["HTTPS_PROXY"] == "http://proxy.example:3128"
    assert spec.proxies and spec.tag == spec.model_copy(update={"proxies": {}}).tag  # a proxy is not in the tag
    assert [w.name for w in spec.wheels] == [CPU_WHEEL] and spec.ca_bundle == ca
    assert spec.base_image == "debian-py311:local"
    assert spec.pip_extra_index_url == "https://mirror.example/simple"  # file:// indexes stay on the host
    monkeypatch.delenv("FT_DOCKER_BASE_IMAGE")
    assert spec_from_settings(load_settings(), flavour="cpu").base_image == images.PUBLIC_BASE_IMAGE


def test_context_holds_the_shared_pins(tmp_path: Path) -> None:
    wheel = tmp_path / CPU_WHEEL
    wheel.write_bytes(b"wheel")
    ca = tmp_path / "proxy.pem"
    ca.write_text("pem")
    ctx = assemble_context(ImageSpec(wheels=[wheel], ca_bundle=ca), tmp_path / "ctx")
    assert (ctx / "envs" / "torch.txt").read_bytes() == config_file("envs", "torch-cpu.txt").read_bytes()
    assert (ctx / "envs" / "tools.lock.txt").read_bytes() == config_file("envs", "tools.lock.txt").read_bytes()
    assert (ctx / "wheels" / CPU_WHEEL).read_bytes() == b"wheel" and (ctx / "certs" / "extra.crt").read_text() == "pem"
    assert "uninstall" in (ctx / "cpu_fix.py").read_text()
    dockerfile = (ctx / "Dockerfile").read_text()
    for needle in ("ARG BASE_IMAGE", "envs/torch.txt", "tools.lock.txt", "cpu_fix.py", "certs/", "wheels/"):
        assert needle in dockerfile
    gpu = assemble_context(ImageSpec(flavour="gpu"), tmp_path / "gpu")
    assert (gpu / "envs" / "torch.txt").read_bytes() == config_file("envs", "torch-gpu.txt").read_bytes()
    # the GPU image gets what the local GPU tool env adds (DeepSpeed for the ZeRO configs, bitsandbytes)
    assert (gpu / "envs" / "tools-extra.txt").read_bytes() == config_file("envs", "tools-gpu.txt").read_bytes()
    assert (ctx / "envs" / "tools-extra.txt").read_text() == ""
    assert "envs/tools-extra.txt" in dockerfile


def test_parse_step() -> None:
    step = parse_step("Step 7/12 : RUN pip install -r /opt/ftagent/envs/torch.txt")
    assert (step.number, step.total) == (7, 12) and step.instruction.startswith("RUN pip")
    assert parse_step(" ---> Running in 4f2") is None


class _FakeImages:
    def __init__(self, present: set[str]) -> None:
        self.present = present

    def get(self, tag: str):
        if tag not in self.present:
            raise docker.errors.ImageNotFound(tag)
        return type("Img", (), {"id": "sha256:abc", "attrs": {"Size": 3_000_000_000}})()


class _FakeAPI:
    def __init__(self, chunks: list[dict], images_: _FakeImages) -> None:
        self.chunks, self.images, self.calls, self.tags = chunks, images_, [], []

    def build(self, **kwargs):
        self.calls.append(kwargs)
        assert (Path(kwargs["path"]) / "Dockerfile").is_file()

        def gen():
            yield from self.chunks
            if not any("error" in c for c in self.chunks):
                self.images.present.add(kwargs["tag"])
        return gen()

    def tag(self, image_id: str, repo: str, tag: str) -> None:
        self.tags.append((image_id, repo, tag))


class _FakeClient:
    def __init__(self, chunks: list[dict], present: set[str] | None = None) -> None:
        self.images = _FakeImages(present or set())
        self.api = _FakeAPI(chunks, self.images)


def test_build_streams_steps_and_skips_a_current_tag(tmp_path: Path) -> None:
    chunks = [{"stream": "Step 1/3 : ARG BASE_IMAGE\n"}, {"stream": "Step 2/3 : FROM ftagent-base:bookworm\n"},
              {"stream": "\x1b[91mwarning on stderr\n\x1b[0m"}, {"stream": "Step 3/3 : RUN pip install x\n"},
              {"aux": {"ID": "sha256:abc"}}, {"stream": "Successfully built abc\n"}]
    client, spec = _FakeClient(chunks), ImageSpec(base_image="ftagent-base:bookworm")
    lines, steps = [], []
    result = build_image(client, spec, log_file=tmp_path / "build.log", on_line=lines.append, on_step=steps.append,
                         network_mode="host")
    assert not result.skipped and result.tag == spec.tag and result.size_bytes == 3_000_000_000
    assert [s.number for s in steps] == [1, 2, 3] and "warning on stderr" in lines  # ANSI colours stripped
    assert "Successfully built abc" in (tmp_path / "build.log").read_text()
    call = client.api.calls[0]
    assert call["network_mode"] == "host" and call["buildargs"]["BASE_IMAGE"] == "ftagent-base:bookworm"
    assert call["labels"][images.LABEL_HASH] == spec.content_hash()
    assert client.api.tags == [("sha256:abc", "ftagent-tools", "cpu")]
    again = build_image(client, spec)
    assert again.skipped and len(client.api.calls) == 1  # unchanged inputs: no rebuild


def test_build_error_names_the_failing_step(tmp_path: Path) -> None:
    chunks = [{"stream": "Step 5/9 : RUN pip install -r /opt/ftagent/envs/torch.txt\n"},
              {"stream": "ERROR: No matching distribution found for torch==2.13.0\n"},
              {"error": "The command '/bin/sh -c pip install' returned a non-zero code: 1",
               "errorDetail": {"code": 1}}]
    with pytest.raises(ImageBuildError, match=r"failed at step 5/9 \(RUN pip install -r /opt/ftagent/envs/torch.txt\)"
                                              r": The command .* non-zero code: 1 \(log: .*build.log\)") as err:
        build_image(_FakeClient(chunks), ImageSpec(), log_file=tmp_path / "build.log")
    assert "No matching distribution found" in str(err.value)
    missing_base = [{"stream": "Step 1/20 : ARG BASE_IMAGE=python:3.11-slim-bookworm\n"},
                    {"stream": "Step 2/20 : FROM ${BASE_IMAGE}\n"},
                    {"error": "pull access denied for nothing, repository does not exist"}]
    with pytest.raises(ImageBuildError, match="build-base.sh"):
        build_image(_FakeClient(missing_base), ImageSpec(base_image="nothing"))


def test_describe_images_for_doctor() -> None:
    from ftagent.runners.images import describe_images

    spec = ImageSpec()

    class Img:
        def __init__(self, tags: list[str]) -> None:
            self.tags, self.short_id, self.labels, self.attrs = tags, "sha256:1", {}, {"Size": 3_070_000_000}

    class Client:
        def __init__(self, tags: list[list[str]]) -> None:
            self.images = type("I", (), {"list": staticmethod(lambda name: [Img(t) for t in tags])})()

    current = describe_images(Client([[spec.tag, spec.alias], ["ftagent-tools:cpu-000000000000"]]), spec)
    assert current.startswith(f"{spec.tag} present and current (3.1 GB") and "stale: ftagent-tools:cpu-0000" in current
    missing = describe_images(Client([]), spec)
    assert missing.startswith(f"{spec.tag} missing: run `ftagent env build-images`")
