"""Evaluation on every GPU (issue 41): vLLM's own data parallelism over the GPUs an evaluation has, a split sent
in one wave, and a trial's model server on its slot's GPUs and port.

The server is a real process: a few lines of stdlib HTTP that answer ``GET /v1/models`` as vLLM's api_server
does and write down the command line and ``CUDA_VISIBLE_DEVICES`` they were started with.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ftagent.runners.vllmenv import vllm_serve_argv
from ftagent.tools.opencompass.render import ModelSpec
from ftagent.tools.opencompass.runs import KEY_EXCLUDED
from ftagent.tools.opencompass.serving import (
    SERVED_NAME,
    WAVE_CAP,
    Placement,
    ServeRequest,
    free_port,
    served_model,
    server_spec,
)

SERVER = r"""
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
record, argv = sys.argv[1], sys.argv[2:]
port = int(argv[argv.index("--port") + 1])
with open(record, "w") as fh:
    json.dump({"argv": argv, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}, fh)
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        body = json.dumps({"data": [{"id": "ft-model"}]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _spec(**kw: object) -> ModelSpec:
    return ModelSpec(backend="vllm-server", device="cuda", abbr="ft", path="/m", tokenizer_path="/m", **kw)  # type: ignore[arg-type]


def test_a_server_gets_a_replica_per_tp_group_and_a_split_in_one_wave() -> None:
    eight = server_spec(_spec(tensor_parallel_size=1, batch_size=16), 8)
    assert (eight.data_parallel_size, eight.batch_size) == (8, WAVE_CAP)  # 8 replicas, at most 512 at once
    two = server_spec(_spec(tensor_parallel_size=2, batch_size=16), 4)
    assert (two.data_parallel_size, two.batch_size) == (2, 512)
    one = server_spec(_spec(tensor_parallel_size=1, batch_size=16), 1)
    assert (one.data_parallel_size, one.batch_size) == (1, 256)  # vLLM's max_num_seqs per replica
    hf = ModelSpec(backend="hf", device="cuda", abbr="ft", path="/m", tokenizer_path="/m", batch_size=16)
    assert server_spec(hf, 8) == hf  # only the vllm-server backend
    # where a server runs is no part of what it scores: the eval cache key leaves them out
    assert {"data_parallel_size", "cuda_visible_devices", "port"} <= KEY_EXCLUDED


def test_the_vllm_command_line_asks_for_data_parallel_replicas_with_their_own_rpc_port() -> None:
    argv = vllm_serve_argv(Path("/env"), "/m", port=18100, tensor_parallel_size=2, data_parallel_size=4,
                           data_parallel_rpc_port=18101)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--data-parallel-size") + 1] == "4"
    assert argv[argv.index("--data-parallel-rpc-port") + 1] == "18101"
    assert "--data-parallel-size" not in vllm_serve_argv(Path("/env"), "/m", port=1)


def test_a_trials_server_runs_on_its_slots_gpus_and_port(tmp_path: Path, monkeypatch) -> None:
    record = tmp_path / "record.json"  # the server's environment is the tools' safe subset: the path goes in argv
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # the session's: the server must not take them all
    port = free_port()
    seen: list[ServeRequest] = []

    def command(request: ServeRequest) -> list[str]:
        seen.append(request)
        return [sys.executable, "-c", SERVER, str(record), "--port", str(request.port),
                "--data-parallel-size", str(request.data_parallel_size)]

    mspec = server_spec(_spec(tensor_parallel_size=1), 2, Placement(gpus="GPU-a,GPU-b", port=port))
    with served_model(mspec, command, tmp_path, timeout=60) as served:
        assert served.api_base == f"http://127.0.0.1:{port}/v1/" and served.served_name == SERVED_NAME
    (request,) = seen
    assert (request.port, request.data_parallel_size, request.data_parallel_rpc_port) == (port, 2, port + 1)
    got = json.loads(record.read_text())
    assert got["cuda"] == "GPU-a,GPU-b" and got["argv"][-1] == "2"
