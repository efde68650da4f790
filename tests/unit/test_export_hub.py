"""`--push-to-hub` against a local stand-in of the Hub's HTTP API (whoami, create repo, preupload,
commit): the token is checked first, the repo is created private, and every exported file arrives
byte for byte. The real Hub is not reachable from the test machines."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ftagent.core.errors import UserInputError
from ftagent.finetune.export import ExportRequest, export_model
from tests.unit.test_export import NoToolRunner
from tests.unit.test_export_sessions import exportable_session

TOKEN = "hf_standin_TOKEN"


class StandInHub(ThreadingHTTPServer):
    """The four Hub endpoints ``create_repo`` + ``upload_folder`` use (all files as regular blobs)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, str]] = []
        self.repos: dict[str, dict] = {}
        self.files: dict[str, bytes] = {}
        self.card_results: list | None = None
        self.refuse_commit = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: StandInHub

    def log_message(self, *args) -> None:  # quiet
        pass

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorised(self) -> bool:
        if self.headers.get("authorization") != f"Bearer {TOKEN}":
            self._reply(401, {"error": "Invalid credentials in Authorization header"})
            return False
        return True

    def do_GET(self) -> None:  # noqa: N802
        self.server.requests.append(("GET", self.path))
        if not self._authorised():
            return
        if self.path.startswith("/api/whoami-v2"):
            self._reply(200, {"type": "user", "name": "tester", "auth": {"type": "access_token"}})
        else:
            self._reply(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        self.server.requests.append(("POST", self.path))
        if not self._authorised():
            return
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path == "/api/validate-yaml":  # the Hub checks the card's metadata: here the library's parser
            from huggingface_hub import ModelCard

            try:
                self.server.card_results = ModelCard(json.loads(body)["content"]).data.eval_results
                self._reply(200, {"warnings": []})
            except Exception as exc:  # noqa: BLE001 - any parse error is the Hub's 400
                self._reply(400, {"errors": [{"message": str(exc)}]})
        elif self.path == "/api/repos/create":
            req = json.loads(body)
            repo = f"{req['organization']}/{req['name']}"
            self.server.repos[repo] = req
            self._reply(200, {"url": f"{self.server.url}/{repo}"})
        elif "/preupload/" in self.path:
            files = json.loads(body)["files"]
            self._reply(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                        for f in files]})
        elif "/commit/" in self.path and self.server.refuse_commit:
            self._reply(403, {"error": "You don't have the rights to create a model under this namespace"})
        elif "/commit/" in self.path:
            for line in body.splitlines():
                item = json.loads(line)
                if item["key"] == "file":
                    self.server.files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            repo = self.path.split("/api/models/", 1)[1].split("/commit/", 1)[0]
            self._reply(200, {"commitUrl": f"{self.server.url}/{repo}/commit/{'0' * 40}", "commitOid": "0" * 40})
        else:
            self._reply(404, {"error": "not found"})


@pytest.fixture
def online(monkeypatch):
    """huggingface_hub as on a machine with network (the test environment sets HF_HUB_OFFLINE=1)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def test_push_uploads_every_file_to_a_private_repo(tmp_path, monkeypatch, online):
    session = exportable_session(tmp_path)
    with StandInHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        result = export_model(ExportRequest(session_dir=session, to=tmp_path / "out", push_to_hub="me/tiny-add"),
                              NoToolRunner)
        requests, repos, files, results = list(hub.requests), dict(hub.repos), dict(hub.files), hub.card_results
    assert requests[0] == ("GET", "/api/whoami-v2")  # checked before anything was written
    assert repos["me/tiny-add"]["visibility"] == "private"
    folder = Path(result.folder)
    local = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert files == local and "README.md" in files and "reproduce/train.yaml" in files
    assert b"name: tiny-add" in files["README.md"]  # the card is named after the repo
    assert result.hub_url == f"{hub.url}/me/tiny-add"
    assert [(r.dataset_split, r.metric_value) for r in results] == [("validation", 0.4), ("test", 0.35)]


def test_refused_token_uploads_and_writes_nothing(tmp_path, monkeypatch, online):
    session = exportable_session(tmp_path)
    with StandInHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_TOKEN", "hf_wrong")
        with pytest.raises(UserInputError, match="refused HF_TOKEN"):
            export_model(ExportRequest(session_dir=session, to=tmp_path / "out", push_to_hub="me/tiny-add"),
                         NoToolRunner)
        requests = list(hub.requests)
    assert requests == [("GET", "/api/whoami-v2")] and not (tmp_path / "out").exists()


def test_failed_upload_keeps_the_folder_and_says_how_to_retry(tmp_path, monkeypatch, online):
    from ftagent.core.errors import EnvironmentFailure

    session = exportable_session(tmp_path)
    with StandInHub() as hub:
        hub.refuse_commit = True
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        with pytest.raises(EnvironmentFailure, match="hf upload me/tiny-add") as err:
            export_model(ExportRequest(session_dir=session, to=tmp_path / "out", push_to_hub="me/tiny-add"),
                         NoToolRunner)
    assert TOKEN not in str(err.value) and (tmp_path / "out" / "README.md").is_file()
