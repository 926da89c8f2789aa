"""``corpus serve`` (the HTTP API and search page), ``corpus api-key`` (a new key and the line
that grants it) and ``corpus openapi`` (the API's OpenAPI document)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from corpus_index.cli.app import (
    announce_model_loading,
    handle_errors,
    main,
    settings_of,
    writing,
)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="Port."
)
@click.option("--no-trace", is_flag=True, help="Do not store query traces in the registry.")
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="info",
    show_default=True,
    help="Server log level.",
)
@click.pass_context
@handle_errors
def serve(ctx: click.Context, host: str, port: int, no_trace: bool, log_level: str) -> None:
    """Serve the search API (/v1), /metrics and the search page over HTTP.

    API keys map to principals through the file (or environment variable) that `serve` in
    corpus.yaml names; `corpus api-key` makes one.
    """
    import uvicorn

    from corpus_index.http import create_app
    from corpus_index.http.service import Service

    settings = settings_of(ctx)
    serve_config = settings.load().serve  # a bad configuration fails here, before the port opens
    if serve_config.api_keys_file is None and serve_config.api_keys_env is None:
        click.echo(
            "warning: corpus.yaml has no `serve: {api_keys_file: ...}` (or api_keys_env): every "
            "request will be refused (401); make a key with `corpus api-key`",
            err=True,
        )
    announce_model_loading()
    # opened here, not as the app starts: a registry it cannot reach or keys it cannot read
    # end the command with its message and exit code, not uvicorn's traceback and exit 3
    service = Service(settings, record_traces=not no_trace)
    app = create_app(settings, service=service)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


def _not_blank(
    ctx: click.Context, param: click.Parameter, value: str | tuple[str, ...]
) -> str | tuple[str, ...]:
    """A tenant, group or key name that is not blank: the server refuses a keys file with an
    entry of an empty tenant or group whole (every key in it), and a key is revoked by name."""
    if any(not v.strip() for v in ((value,) if isinstance(value, str) else value)):
        raise click.BadParameter("must not be empty")
    return value


def _not_blank_or_none(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else str(_not_blank(ctx, param, value))


@main.command("api-key")
@click.option(
    "--tenant",
    callback=_not_blank_or_none,
    help="The tenant the key searches for (required unless the key is for --metrics alone).",
)
@click.option(
    "--group",
    "groups",
    multiple=True,
    callback=_not_blank,
    help="A group of the key (repeatable).",
)
@click.option(
    "--metrics",
    "metrics",
    is_flag=True,
    help="The key may read /metrics too (without --tenant: only /metrics, no search).",
)
@click.option(
    "--name",
    required=True,
    callback=_not_blank,
    help="A name for the key (for revocation and logs).",
)
@click.option(
    "--file",
    "keys_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append the key's hash to this keys file (default: only print it).",
)
@handle_errors
def api_key(
    tenant: str | None,
    groups: tuple[str, ...],
    metrics: bool,
    name: str,
    keys_file: Path | None,
) -> None:
    """Make a new API key: prints the key once (keep it) and the keys-file entry of its hash."""
    import yaml

    from corpus_index.http.keys import (
        METRICS,
        SEARCH,
        key_hash,
        new_key,
        parse_keys,
        read_keys_file,
        write_keys,
    )

    if tenant is None and not metrics:
        raise click.UsageError(
            "Missing option '--tenant' (a key searches for one tenant; --metrics without "
            "--tenant makes a key that reads /metrics only)"
        )
    if tenant is None and groups:
        raise click.UsageError("--group is for a key that searches: give its --tenant too")
    key = new_key()
    entry: dict[str, object] = {"name": name, "sha256": key_hash(key)}
    if tenant is not None:
        entry |= {"tenant": tenant, "groups": list(groups)}
    if metrics:
        entry["scopes"] = [SEARCH, METRICS] if tenant is not None else [METRICS]
    what = f"for tenant {tenant}" if tenant is not None else "that reads /metrics only"
    if keys_file is not None:
        doc = (read_keys_file(keys_file) if keys_file.exists() else None) or {"keys": []}
        parse_keys(doc, source=str(keys_file))  # refuse to extend a broken file
        keys = doc.setdefault("keys", [])
        if any(k.get("name") == name for k in keys):
            raise click.UsageError(f"{keys_file} already has a key named {name!r}")
        keys.append(entry)
        write_keys(keys_file, doc)
        click.echo(f"added key {name!r} {what} to {keys_file}", err=True)
    else:
        click.echo(yaml.safe_dump({"keys": [entry]}, sort_keys=False), err=True)
    click.echo(key)


@main.command()
@click.argument("path", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
@handle_errors
def openapi(ctx: click.Context, path: Path | None) -> None:
    """Print (or write to PATH) the HTTP API's OpenAPI document."""
    from corpus_index.http import create_app

    text = json.dumps(create_app(settings_of(ctx)).openapi(), indent=2, sort_keys=True) + "\n"
    if path is None:
        click.echo(text, nl=False)
    else:
        with writing(path, "the OpenAPI document"):
            path.write_text(text, encoding="utf-8")
