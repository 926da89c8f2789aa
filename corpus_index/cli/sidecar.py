"""``corpus sidecar verify``: re-validate an RFC 0013 sidecar against the file it belongs to."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from corpus_index.cli.app import (
    EXIT_FAILED,
    EXIT_USAGE,
    emit_json,
    handle_errors,
    main,
    settings_of,
    writing,
)
from corpus_index.config import DEFAULT_SECTIONS
from corpus_index.errors import ParseError, SidecarError
from corpus_index.kinds.uw_deals import SUFFIX, parse_text
from corpus_index.sidecars import (
    current_block_hashes,
    mark_stale,
    read_sidecar,
    sidecar_path,
    uw_text,
    write_sidecar,
)


@main.group("sidecar")
def sidecar_group() -> None:
    """RFC 0013 sidecars (<deal>.embeddings.json) that travel with their files."""


@sidecar_group.command("verify")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--sidecar",
    "sidecar_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The sidecar to check (default: <deal>.embeddings.json beside FILE).",
)
@click.option("--mark", is_flag=True, help="Write the stale marks into the sidecar file.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@click.pass_context
@handle_errors
def verify(
    ctx: click.Context, file: Path, sidecar_file: Path | None, mark: bool, as_json: bool
) -> None:
    """Check FILE.uw.md's sidecar against the file as it is now.

    The sidecar must conform to the schema and be for FILE's deal; each entry is current when
    its pin (content_hash) still matches its block, stale otherwise. Embeddable sections come
    from the configuration when there is one (else RFC 0013's registry); a block of them with
    no entry is listed as missing. Exit 0 when every entry is current, 1 when any is stale,
    2 when the sidecar or FILE is invalid, or the sidecar is not FILE's.
    """
    if not file.name.endswith(SUFFIX):
        raise click.BadParameter(f"{file}: an underwriting file is named *{SUFFIX}")
    path = sidecar_file or sidecar_path(file)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no sidecar beside {file.name}; pass --sidecar PATH")
    sidecar = read_sidecar(path)
    config_path = settings_of(ctx).config_path
    sections = settings_of(ctx).load().sections if config_path.is_file() else DEFAULT_SECTIONS
    try:
        front, _ = parse_text(str(file), uw_text(file))
        current = current_block_hashes(file, sections)
    except ParseError as exc:  # nothing to check the sidecar against: invalid, not stale
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    if str(sidecar["deal_id"]) != str(front.get("deal_id")):
        raise SidecarError(
            "$.deal_id",
            f"the sidecar is for deal {sidecar['deal_id']!r}, {file} is {front.get('deal_id')!r}",
            source=str(path),
        )
    marked, stale = mark_stale(sidecar, current)
    keys = {b.get("block_key") for b in marked["blocks"]}
    pins = {(b["section"], b["content_hash"]) for b in marked["blocks"]}
    missing = [
        k for k, h in current.items() if k not in keys and (k.split("/", 1)[0], h) not in pins
    ]
    if mark:
        with writing(path, "the stale marks"):
            write_sidecar(path, marked, validate=False)  # mark_stale validated it
    report = {
        "file": str(file),
        "sidecar": str(path),
        "deal_id": sidecar["deal_id"],
        "embedder": sidecar["embedder"],
        "entries": len(marked["blocks"]),
        "current": len(marked["blocks"]) - len(stale),
        "stale": stale,
        "missing": missing,
        "marked": mark,
    }
    if as_json:
        emit_json(report)
    else:
        click.echo(
            f"{path}: {report['current']} of {report['entries']} entries current"
            + (f"; stale: {', '.join(stale)}" if stale else "")
            + (f"; blocks without an entry: {', '.join(missing)}" if missing else "")
            + ("; marks written" if mark else "")
        )
    if stale:
        sys.exit(EXIT_FAILED)
