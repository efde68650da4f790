"""The record of a registered user file: :class:`UserDataset`, written as ``.user_dataset.json`` in its dataset
folder (origin, sha256, format, column and tag mapping, row counts), and how to read it back."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from ftagent.datasets.user_file.layout import ALPACA_COLUMNS

INFO_FILE = ".user_dataset.json"


class UserDataset(BaseModel):
    """A registered user file (``.user_dataset.json`` in its dataset folder)."""

    name: str = Field(description="the dataset name the session uses")
    source_path: str = Field(description="the file the user passed (absolute)")
    file_name: str = Field(description="the copy's name inside the dataset folder")
    sha256: str
    format: str = Field(description="'alpaca' or 'sharegpt'")
    columns: list[str] = Field(default_factory=list, description="every column found in the file")
    messages: str | None = Field(None, description="ShareGPT: the column holding the turns")
    role_tag: str | None = None
    content_tag: str | None = None
    user_tag: str | None = None
    assistant_tag: str | None = None
    rows: int = 0
    usable_rows: int | None = Field(None, description="rows with a text instruction and answer (None: not counted)")
    registered_at: float = 0.0
    reused: bool = Field(False, exclude=True, description="this call found the copy already there")
    scan: str = Field("", exclude=True, description="the contamination scan's result, said at start-up")

    def describe(self) -> str:
        """One line: which format was detected, how many rows, where the copy is."""
        if self.format == "sharegpt":
            layout = (f"ShareGPT (`{self.messages}` turns with `{self.role_tag}`/`{self.content_tag}`, "
                      f"{self.user_tag}/{self.assistant_tag})")
        else:
            layout = "Alpaca (" + ", ".join(f"`{c}`" for c in ALPACA_COLUMNS if c in self.columns) + ")"
        extra = sorted(set(self.columns) - set(ALPACA_COLUMNS) - {self.messages})
        ignored = f"; columns ignored: {', '.join(extra)}" if extra else ""
        how = "reused the copy" if self.reused else "copied"
        usable = (f" ({self.usable_rows:,} usable: the others have an empty or non-text question or answer)"
                  if self.usable_rows is not None and self.usable_rows < self.rows else "")
        return (f"dataset `{self.name}` from {Path(self.source_path).name}: {layout} detected, {self.rows:,} rows"
                f"{usable}{ignored}; {how} under FT_FILE_PATH/datasets/{self.name}/"
                + (f"; {self.scan}" if self.scan else ""))


def read_info(folder: Path) -> UserDataset | None:
    """The :class:`UserDataset` of a dataset folder, or None when it is not a user file's copy."""
    try:
        return UserDataset.model_validate_json((Path(folder) / INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
