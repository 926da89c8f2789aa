"""deploy/ checked as far as this machine allows (no docker or helm binary here): the Helm values
against the chart's values schema and against the limits the tests run with, the instance they
describe loaded by Dagster, and the image definition linted."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import dagster as dg
import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from corpus_index.dagster_home import (
    MAX_CONCURRENT_RUNS,
    POOL_DEFAULT_LIMIT,
    RUN_MONITORING,
    RUN_TAG_LIMITS,
)
from corpus_index.environment import EXECUTORS, POSTGRES_SCHEME, PROCESS_DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S_DEFINITIONS = "https://kubernetesjsonschema.dev/"


def values() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text(encoding="utf-8")))


def without_required(node: Any) -> Any:
    """The schema less its ``required`` lists: the chart's own values.yaml supplies those keys,
    and only the keys this file sets are checked."""
    if isinstance(node, dict):
        return {k: without_required(v) for k, v in node.items() if k != "required"}
    if isinstance(node, list):
        return [without_required(v) for v in node]
    return node


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def validator() -> jsonschema.Draft7Validator:
    schema = json.loads((DEPLOY / "helm" / "values.schema.extract.json").read_text("utf-8"))
    # Kubernetes' own object schemas are not here (no network): each one the chart refers to
    # is an open schema, so any object passes where the chart expects one
    kubernetes: dict[str, Any] = {}
    for ref in refs(schema):
        if ref.startswith(K8S_DEFINITIONS):
            node = kubernetes
            for part in ref.split("#/", 1)[1].split("/"):
                node = node.setdefault(part, {})

    def retrieve(uri: str) -> Resource[Any]:
        if not uri.startswith(K8S_DEFINITIONS):
            raise LookupError(uri)
        return DRAFT7.create_resource(kubernetes)

    registry: Registry[Any] = Registry(retrieve=retrieve)  # type: ignore[call-arg]
    return jsonschema.Draft7Validator(without_required(schema), registry=registry)


def errors(data: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(data)
    ]


def test_the_values_match_the_charts_schema() -> None:
    assert errors(values()) == []


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        (["dagsterDaemon", "runCoordinator", "config", "queuedRunCoordinator"], {"maxRuns": 4}),
        (["runLauncher"], {"type": "KubernetesRunLauncher"}),
        (["postgresql"], {"postgresqlScheme": 5}),
    ],
)
def test_the_schema_check_catches_a_wrong_key_or_type(path: list[str], bad: dict[str, Any]) -> None:
    data = values()
    node = data
    for key in path:
        node = node[key]
    node.update(bad)
    assert errors(data)


def queue_config() -> dict[str, Any]:
    return dict(values()["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"])


def test_the_values_have_the_limits_the_tests_run_with() -> None:
    # Dagster refuses run limits in the coordinator's config beside `concurrency: pools:`, so
    # they are in `concurrency: runs:` (additionalInstanceConfig) and the coordinator has none
    assert queue_config() == {}
    concurrency = values()["additionalInstanceConfig"]["concurrency"]
    runs = concurrency["runs"]
    assert runs["max_concurrent_runs"] == MAX_CONCURRENT_RUNS
    assert [(t["key"], t["limit"]) for t in runs["tag_concurrency_limits"]] == RUN_TAG_LIMITS
    assert all(
        t["value"] == {"applyLimitPerUniqueValue": True} for t in runs["tag_concurrency_limits"]
    )
    assert concurrency["pools"] == {"granularity": "op", "default_limit": POOL_DEFAULT_LIMIT}
    monitoring = values()["dagsterDaemon"]["runMonitoring"]
    camel = {
        re.sub(r"_(\w)", lambda m: m.group(1).upper(), k): v for k, v in RUN_MONITORING.items()
    }
    assert monitoring == {"enabled": True, **camel}
    assert values()["postgresql"]["postgresqlScheme"] + "://" == POSTGRES_SCHEME


def test_dagster_accepts_the_instance_the_values_describe(tmp_path: Path) -> None:
    # what the chart writes into dagster.yaml from these values (storage aside): the queued
    # coordinator with no limits of its own, and the instance config added as it is
    instance_yaml = {
        "run_coordinator": {
            "module": "dagster.core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": queue_config(),
        },
        **values()["additionalInstanceConfig"],
    }
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(instance_yaml), encoding="utf-8")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        concurrency = instance.get_concurrency_config()
        assert concurrency.run_queue_config is not None
        assert concurrency.run_queue_config.max_concurrent_runs == MAX_CONCURRENT_RUNS
        limits = concurrency.run_queue_config.tag_concurrency_limits
        assert [(t["key"], t["limit"]) for t in limits] == RUN_TAG_LIMITS
        assert concurrency.pool_config.default_pool_limit == POOL_DEFAULT_LIMIT


def dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text(encoding="utf-8")


def test_the_image_base_is_pinned_python_311_slim() -> None:
    bases = re.findall(r"^FROM\s+(\S+)", dockerfile(), flags=re.MULTILINE)
    assert bases, "deploy/Dockerfile has no FROM line"
    for base in bases:
        pinned = re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", base)
        assert pinned, f"deploy/Dockerfile: base image {base} is not python:3.11.<patch>-slim"


def test_the_image_pins_torch_as_the_makefile_does() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    [make_pin] = set(re.findall(r"torch==([\w.+]+)", makefile))
    image_pins = set(re.findall(r"torch==([\w.+]+)", dockerfile()))
    assert image_pins == {make_pin}
    assert "--index-url https://download.pytorch.org/whl/cpu torch==" in dockerfile()


def test_the_image_has_the_k8s_library_of_the_pinned_dagster_release() -> None:
    constraints = (ROOT / "constraints.txt").read_text(encoding="utf-8")
    [postgres_pin] = re.findall(r"^dagster-postgres==(\S+)$", constraints, flags=re.MULTILINE)
    assert re.findall(r"dagster-k8s==(\S+)", dockerfile()) == [postgres_pin]


def image_env() -> dict[str, str]:
    """The ENV of the Dockerfile (``NAME=value`` pairs, continued lines joined)."""
    text = dockerfile().replace("\\\n", " ")
    pairs: dict[str, str] = {}
    for line in re.findall(r"^ENV\s+(.+)$", text, flags=re.MULTILINE):
        pairs.update(dict(re.findall(r"(\w+)=(\S+)", line)))
    return pairs


def test_the_image_sets_the_process_defaults_and_the_executor() -> None:
    env = image_env()
    assert env["CORPUS_EXECUTOR"] in EXECUTORS
    logs = ("LANCE_LOG", "LANCEDB_LOG")
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM", *logs):
        assert env[name] == PROCESS_DEFAULTS[name], name


def known_names() -> str:
    """The source that reads environment variables: the project, and the servers the tests start
    (whose environment is what the object-store libraries read)."""
    files = [*ROOT.glob("corpus_index/**/*.py"), ROOT / "definitions.py"]
    files += [*ROOT.glob("tests/support/*.py"), ROOT / "tests/dagster/test_postgres_instance.py"]
    return "\n".join(f.read_text(encoding="utf-8") for f in files)


def deployed_names() -> list[str]:
    deployment = values()["dagster-user-deployments"]["deployments"][0]
    names = [e["name"] for e in deployment["env"]] + list(image_env())
    return sorted({n for n in names if n.startswith(("CORPUS_", "AWS_", "OPENAI_"))})


@pytest.mark.parametrize("name", deployed_names())
def test_every_deployed_variable_is_one_the_project_or_its_tests_use(name: str) -> None:
    assert f'"{name}"' in known_names(), f"deploy/ sets {name}, which nothing here reads"


def test_the_home_is_a_folder_the_images_user_may_write() -> None:
    # the image runs as `USER corpus` in a WORKDIR root created and filled: a home left at its
    # default (WORKDIR/.corpus) fails the first step that takes the home's lock with EACCES
    text = dockerfile().replace("\\\n", " ")
    deployment = values()["dagster-user-deployments"]["deployments"][0]
    env = {**image_env(), **{e["name"]: e.get("value") for e in deployment["env"]}}
    workdir = re.findall(r"^WORKDIR\s+(\S+)", text, flags=re.MULTILINE)[-1]
    home = env.get("CORPUS_HOME") or ".corpus"
    home = home if home.startswith("/") else f"{workdir}/{home}"
    chowned = [
        path.strip('"').replace("$CORPUS_HOME", env["CORPUS_HOME"] or "")
        for path in re.findall(r"chown\s+(?:-R\s+)?corpus\s+([^\s&]+)", text)
    ]
    assert home in chowned, f"deploy/Dockerfile: the home {home} is not chowned to corpus"
    mounts = {m["mountPath"] for m in deployment["volumeMounts"] if not m.get("readOnly")}
    assert home in mounts, f"deploy/helm/values.yaml: the home {home} is not a volume"
