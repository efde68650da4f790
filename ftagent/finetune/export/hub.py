"""``--push-to-hub REPO``: upload the exported folder with ``huggingface_hub``.

Reachability and the token are checked (``whoami``) before anything is created or uploaded, so an
offline machine or a bad token is one clear error and nothing half-uploaded. The endpoint is
huggingface_hub's own ``HF_ENDPOINT`` (default https://huggingface.co), the token ``HF_TOKEN``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ftagent.core.errors import EnvironmentFailure, UserInputError

if TYPE_CHECKING:
    from huggingface_hub import HfApi

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")


def _api(token: str) -> HfApi:
    from huggingface_hub import HfApi

    return HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)


def check_hub(repo_id: str) -> str:
    """Check the repo id, the token and that the Hub answers; return the account name.

    Raises:
        UserInputError: bad repo id, no ``HF_TOKEN``, the Hub unreachable (offline) or the token refused.
    """
    if not REPO_ID.match(repo_id):
        raise UserInputError(f"--push-to-hub needs a repo id like 'me/my-model', not '{repo_id}'")
    token = os.environ.get("HF_TOKEN")
    if not token:
        raise UserInputError("--push-to-hub needs HF_TOKEN (a write token from huggingface.co/settings/tokens)")
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    try:
        info = _api(token).whoami()
    except Exception as exc:  # noqa: BLE001 - offline mode, DNS, refused connection, 401: all the same answer
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            raise UserInputError(f"the Hub at {endpoint} refused HF_TOKEN (HTTP {status}); nothing was uploaded") from exc
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise UserInputError(f"the Hub at {endpoint} cannot be reached ({type(exc).__name__}: {reason}); "
                             "nothing was uploaded. The export folder is kept: push it later.") from exc
    return str(info.get("name") or "")


def push_folder(folder: Path, repo_id: str, *, private: bool = True) -> str:
    """Create ``repo_id`` (a model repo, private by default) if needed and upload ``folder``; its URL.

    Raises:
        EnvironmentFailure: the Hub refused or the connection broke during the upload (the folder is kept;
            re-running the push uploads only what is missing).
    """
    api = _api(os.environ["HF_TOKEN"])
    try:
        url = api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                          commit_message="ftagent export")
    except Exception as exc:  # noqa: BLE001 - HTTP, connection and metadata errors alike
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise EnvironmentFailure(f"uploading {folder} to {repo_id} failed ({type(exc).__name__}: {reason}); "
                                 "the export folder is kept: push it again with "
                                 f"`hf upload {repo_id} {folder}`") from exc
    return str(url)
