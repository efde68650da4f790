"""`ftagent datasets list|prepare|show` (module imports stay light; work happens inside commands)."""

from __future__ import annotations

import typer

from ftagent.cli.common import prepare_env

app = typer.Typer(help="List, prepare and inspect raw training datasets.", no_args_is_help=True)
_LIST_LINE = "{:14} {:45} {:9} {}"  # `datasets list`: the header and each row


def _file_path():
    from ftagent.core.settings import load_settings

    prepare_env()
    return load_settings().ft.file_path


@app.command("list")
def datasets_list(
    benchmark: str | None = typer.Option(None, "--benchmark", help="only datasets related to this key"),
    as_json: bool = typer.Option(False, "--json", help="the rows as JSON (the MCP server's datasets tool)"),
) -> None:
    """List registered datasets: name, source repo, related benchmarks, prepared or not."""
    from ftagent.datasets.listing import dataset_rows

    rows = dataset_rows(_file_path(), benchmark)
    if as_json:
        typer.echo("[" + ",\n".join(r.model_dump_json() for r in rows) + "]")
        return
    typer.echo(_LIST_LINE.format("NAME", "SOURCE", "STATE", "BENCHMARKS"))
    for row in rows:
        typer.echo(_LIST_LINE.format(row.name, row.source, "prepared" if row.prepared else "-",
                                     ", ".join(row.related_benchmarks)))


@app.command("prepare")
def datasets_prepare(
    name: str | None = typer.Argument(None, help="dataset name, or 'all'"),
    benchmark: str | None = typer.Option(None, "--benchmark", help="prepare the datasets related to this key"),
    force: bool = typer.Option(False, "--force", help="download/generate again"),
    catalogue: bool = typer.Option(True, "--catalogue/--no-catalogue", help="update dataset_info.json"),
) -> None:
    """Download (or generate) datasets into FT_FILE_PATH/datasets and update the catalogue."""
    from ftagent.core.errors import UserInputError
    from ftagent.core.paths import datasets_dir
    from ftagent.datasets.catalogue import build_catalogue
    from ftagent.datasets.prepare import prepare_datasets
    from ftagent.datasets.registry import resolve_dataset_choice

    if not name and not benchmark:
        raise UserInputError("name a dataset (or 'all'), or pass --benchmark KEY")
    file_path = _file_path()
    names = resolve_dataset_choice(name, benchmark, _related(benchmark) if benchmark else [])
    if not names:
        raise UserInputError(f"no dataset is related to benchmark '{benchmark}'; pass a name or 'all'")
    for dataset, path in prepare_datasets(names, file_path, force=force).items():
        typer.echo(f"{dataset}: {path}")
    if catalogue:
        build_catalogue(datasets_dir(file_path), names)
        typer.echo(f"catalogue: {datasets_dir(file_path) / 'dataset_info.json'}")


@app.command("show")
def datasets_show(
    name: str = typer.Argument(..., help="dataset name"),
    code: bool = typer.Option(False, "--code", help="print the default Alpaca converter's source"),
) -> None:
    """Show a dataset: spec, our notes, catalogue statistics when prepared."""
    import json

    from ftagent.core.paths import datasets_dir
    from ftagent.datasets.base import converter_source
    from ftagent.datasets.catalogue import CATALOGUE_FILE, DatasetEntry, render_entry
    from ftagent.datasets.registry import get_source

    source = get_source(name)
    typer.echo(json.dumps(source.spec.model_dump(), indent=2, ensure_ascii=False))
    typer.echo(source.readme())
    cat = datasets_dir(_file_path()) / CATALOGUE_FILE
    if cat.is_file():
        entry = json.loads(cat.read_text(encoding="utf-8")).get(name)
        if entry:
            typer.echo(render_entry(name, DatasetEntry.model_validate(entry)))
    if code:
        typer.echo(converter_source(source))


def _related(benchmark: str) -> list[str]:
    from ftagent.datasets.listing import related_datasets

    return related_datasets(benchmark)
