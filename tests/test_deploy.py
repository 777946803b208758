"""infra/deploy: the compose file, the image and the proxy, checked without a Docker engine."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "infra" / "deploy"
TACHOGRAPH_SERVICES = ("api-1", "api-2", "worker")

# The Compose Specification's keys (top level and per service) this file may use; a typo
# such as `enviroment:` would otherwise be ignored by nothing but a running engine.
TOP_LEVEL_KEYS = {"name", "services", "volumes", "networks", "configs", "secrets", "version"}
SERVICE_KEYS = {
    "build", "command", "container_name", "depends_on", "deploy", "entrypoint", "environment",
    "env_file", "expose", "healthcheck", "image", "labels", "logging", "networks", "ports",
    "restart", "stop_grace_period", "stop_signal", "ulimits", "user", "volumes", "working_dir",
}  # fmt: skip
HEALTHCHECK_KEYS = {"test", "interval", "timeout", "retries", "start_period", "disable"}
_VARIABLE = re.compile(r"\$\{(?P<name>[A-Z_][A-Z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert isinstance(document, dict)
    return document


def interpolate(value: str, given: dict[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:-default}` and `${VAR:?error}` with `given` as the shell."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        if name in given:
            return given[name]
        if op and op.endswith("?"):
            raise KeyError(f"{name} is required: {arg}")
        return arg or ""

    return _VARIABLE.sub(one, value)


def service_env(compose: dict[str, Any], name: str, given: dict[str, str]) -> dict[str, str]:
    raw = compose["services"][name].get("environment", {})
    assert isinstance(raw, dict), f"{name}: environment as a mapping"
    return {k: interpolate(str(v), given) for k, v in raw.items()}


REQUIRED = {
    "POSTGRES_PASSWORD": "pg-secret",
    "TACHOGRAPH_API_KEY": "a" * 32,
    "TACHOGRAPH_LOG_SIGNING_KEY": "s" * 32,
}


def test_compose_uses_only_known_keys_and_declares_its_volumes(compose: dict[str, Any]) -> None:
    assert {k for k in compose if not k.startswith("x-")} <= TOP_LEVEL_KEYS  # x-: extensions
    assert {"postgres", "api-1", "api-2", "worker", "proxy"} == set(compose["services"])
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        assert set(service) <= SERVICE_KEYS, (name, set(service) - SERVICE_KEYS)
        assert "image" in service or "build" in service, name
        if "healthcheck" in service:
            assert set(service["healthcheck"]) <= HEALTHCHECK_KEYS, name
            assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
        for mount in service.get("volumes", []):
            source = mount.split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in declared, (name, source)
            else:
                assert (DEPLOY / source).exists(), (name, source)
        for dependency in service.get("depends_on", {}):
            assert dependency in compose["services"], (name, dependency)


def test_two_api_replicas_and_one_worker_share_one_postgres_schema(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    commands = {name: services[name]["command"] for name in TACHOGRAPH_SERVICES}
    assert commands["api-1"][:1] == commands["api-2"][:1] == ["serve"]
    assert "0.0.0.0" in commands["api-1"] and "0.0.0.0" in commands["api-2"]
    assert commands["worker"][0] == "worker"
    envs = {name: service_env(compose, name, REQUIRED) for name in TACHOGRAPH_SERVICES}
    urls = {env["TACHOGRAPH_DATABASE_URL"] for env in envs.values()}
    schemas = {env["TACHOGRAPH_DATABASE_SCHEMA"] for env in envs.values()}
    assert len(urls) == 1 and len(schemas) == 1, "one log, one set of read models"
    (url,) = urls
    assert "@postgres:5432/" in url
    postgres = services["postgres"]
    assert postgres["environment"]["POSTGRES_DB"] == url.rsplit("/", 1)[1]
    assert "pg_isready" in postgres["healthcheck"]["test"]
    for name in TACHOGRAPH_SERVICES:
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert "healthcheck" in services[name]
    # The signing key is the same everywhere and never a literal in the file.
    assert len({env["TACHOGRAPH_LOG_SIGNING_KEY"] for env in envs.values()}) == 1
    assert "${TACHOGRAPH_LOG_SIGNING_KEY" in str(services["api-1"]["environment"])
    # Agent processes run on the worker only.
    with_command = {"TACHOGRAPH_TASK_COMMAND": '["claude","-p","{prompt}"]', **REQUIRED}
    assert service_env(compose, "worker", with_command)["TACHOGRAPH_TASK_COMMAND"]
    assert "TACHOGRAPH_TASK_COMMAND" not in envs["api-1"]


def test_every_service_environment_is_a_valid_configuration(compose: dict[str, Any]) -> None:
    for name in TACHOGRAPH_SERVICES:
        env = service_env(compose, name, REQUIRED)
        settings = Settings.from_env(env)  # raises SettingsError naming a bad variable
        assert settings.database_url is not None and settings.database_url.host == "postgres"
        assert settings.api_key == REQUIRED["TACHOGRAPH_API_KEY"]


def test_secrets_must_be_supplied_by_the_operator(compose: dict[str, Any]) -> None:
    for missing in REQUIRED:
        given = {k: v for k, v in REQUIRED.items() if k != missing}
        with pytest.raises(KeyError, match=missing):
            service_env(compose, "api-1", given)


def test_every_tachograph_variable_in_compose_is_documented(compose: dict[str, Any]) -> None:
    readme = (ROOT / "README.md").read_text()
    names = set(re.findall(r"TACHOGRAPH_[A-Z_]+", (DEPLOY / "compose.yaml").read_text()))
    undocumented = {
        n
        for n in names
        if n not in readme
        and not any(
            p.endswith("*") and n.startswith(p[:-1])
            for p in re.findall(r"TACHOGRAPH_[A-Z_]+\*", readme)
        )
    }
    assert not undocumented


def test_proxy_balances_both_replicas(compose: dict[str, Any]) -> None:
    proxy = compose["services"]["proxy"]
    assert set(proxy["depends_on"]) == {"api-1", "api-2"}
    assert all(d["condition"] == "service_healthy" for d in proxy["depends_on"].values())
    assert proxy["ports"]
    conf = (DEPLOY / "nginx.conf").read_text()
    upstream = re.search(r"upstream\s+(\w+)\s*\{(?P<body>[^}]*)\}", conf)
    assert upstream is not None
    assert re.findall(r"server\s+([\w.-]+:\d+)", upstream["body"]) == ["api-1:8000", "api-2:8000"]
    assert f"proxy_pass http://{upstream[1]};" in conf
    assert conf.count("{") == conf.count("}")
    assert "X-Request-Id" in conf  # one id from the edge to the replica's logs


def test_dockerfile_installs_every_package_and_runs_unprivileged() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    instructions = [line.split()[0] for line in dockerfile.splitlines() if line[:1].isalpha()]
    assert instructions[0] == "FROM" and "python:3.11" in dockerfile
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for include in packages["packages"]["find"]["include"]:
        package = include.rstrip("*")
        assert re.search(rf"^COPY {package} ", dockerfile, re.M), package
        assert (ROOT / package).is_dir()
    for module in packages["py-modules"]:
        assert re.search(rf"^COPY {module}\.py ", dockerfile, re.M), module
    assert re.search(r"^USER (?!root)\S+", dockerfile, re.M)
    assert 'ENTRYPOINT ["tachograph"]' in dockerfile
    assert re.search(r'^CMD \["serve", "--host", "0\.0\.0\.0"', dockerfile, re.M)
    assert "EXPOSE 8000" in dockerfile
    # The jail of self-update agents (infra/jail.py), in the image that runs them.
    assert re.search(
        r"^RUN apt-get update .*apt-get install [^\n]*bubblewrap", dockerfile, re.M | re.S
    )
