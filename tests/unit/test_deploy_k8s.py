"""Kubernetes manifests: schema-valid offline, consistent with each other and the repo.

Core resources are validated in strict mode against the Kubernetes OpenAPI
schemas bundled in kubernetes-validate (no network). The Prometheus Operator
CRDs (PrometheusRule, ServiceMonitor) are not in those schemas: they are
checked structurally, and the PrometheusRule's groups must equal alerts.yml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from dmt_proxy.policy import load_policy
from dmt_proxy.settings import Settings

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
CRD_KINDS = {"PrometheusRule", "ServiceMonitor"}
# DMT_* variables read by something other than Settings: the model-server entrypoint.
NON_SETTINGS_ENV = {"DMT_SERVE_MODELS"}


def load_docs() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((path.name, doc))
    return docs


def find(kind: str, name: str) -> dict[str, Any]:
    matches = [d for _, d in load_docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


@pytest.mark.parametrize(
    "doc", [d for _, d in load_docs() if d["kind"] not in CRD_KINDS],
    ids=lambda d: f"{d['kind']}/{d['metadata']['name']}",
)  # fmt: skip
def test_core_manifest_is_schema_valid(doc: dict[str, Any]) -> None:
    version = kubernetes_validate.latest_version()
    kubernetes_validate.validate(doc, version, strict=True)


def test_validator_rejects_an_unknown_field() -> None:
    # Guards against a validator that silently accepts everything.
    bad = find("Deployment", "dmt-proxy")
    bad["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGett"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, kubernetes_validate.latest_version(), strict=True)


def test_expected_resources_exist() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for _, d in load_docs()}
    assert kinds >= {
        ("Deployment", "dmt-proxy"), ("Service", "dmt-proxy"),
        ("HorizontalPodAutoscaler", "dmt-proxy"), ("ConfigMap", "dmt-proxy-policy"),
        ("PrometheusRule", "dmt-proxy"), ("ServiceMonitor", "dmt-proxy"),
        ("Deployment", "dmt-models"), ("Service", "dmt-models"),
        ("Deployment", "dmt-worker"), ("StatefulSet", "dmt-postgres"),
        ("Service", "dmt-postgres"),
    }  # fmt: skip


def test_prometheusrule_groups_equal_alerts_yml() -> None:
    rule = find("PrometheusRule", "dmt-proxy")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    alerts = yaml.safe_load((REPO / "deploy" / "prometheus" / "alerts.yml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"], "run: python deploy/k8s/sync.py"
    for group in rule["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules", "limit", "partial_response_strategy"}
        for r in group["rules"]:
            assert set(r) <= {"alert", "record", "expr", "for", "labels", "annotations"}


def test_configmap_carries_the_deployment_policy(tmp_path: Path) -> None:
    cm = find("ConfigMap", "dmt-proxy-policy")
    text = cm["data"]["policy.yaml"]
    assert text == (REPO / "deploy" / "policy.yaml").read_text()
    copy = tmp_path / "policy.yaml"
    copy.write_text(text)
    policy = load_policy(copy)  # validates against the policy schema
    default = load_policy(REPO / "policies" / "default.yaml")
    # The default policy, with memory and outbox in PostgreSQL.
    assert policy.memory.backend == "postgres"
    assert policy.model_dump(exclude={"memory", "source"}) == default.model_dump(
        exclude={"memory", "source"}
    )
    assert policy.memory.model_dump(exclude={"backend"}) == default.memory.model_dump(
        exclude={"backend"}
    )


def test_proxies_and_workers_share_one_database_secret() -> None:
    def env(name: str) -> dict[str, Any]:
        container = find("Deployment", name)["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e for e in container["env"]}

    proxy, worker = env("dmt-proxy"), env("dmt-worker")
    assert proxy["DMT_WORKER"]["value"] == "off"
    assert find("Deployment", "dmt-worker")["spec"]["template"]["spec"]["containers"][0][
        "args"
    ] == ["dmt-proxy", "worker"]
    ref = proxy["DMT_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == worker["DMT_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert "optional" not in ref  # without a database neither can start
    assert proxy["DMT_POLICY_FILE"] == worker["DMT_POLICY_FILE"]


def test_proxy_deployment_wiring() -> None:
    dep = find("Deployment", "dmt-proxy")
    pod = dep["spec"]["template"]
    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/healthz" and get["port"] in ports, probe
    env = {e["name"]: e for e in container["env"]}
    assert env["DMT_PORT"]["value"] == str(ports["http"])
    assert env["DMT_HOST"]["value"] == "0.0.0.0"
    # The policy file path is where the ConfigMap volume is mounted.
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    policy_vol = next(n for n, v in volumes.items() if "configMap" in v)
    assert volumes[policy_vol]["configMap"]["name"] == "dmt-proxy-policy"
    item = volumes[policy_vol]["configMap"]["items"][0]
    assert env["DMT_POLICY_FILE"]["value"] == f"{mounts[policy_vol]}/{item['path']}"
    assert env["DMT_MODELS_HOST"]["value"] == find("Service", "dmt-models")["metadata"]["name"]
    # Selector matches the pod template.
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def test_dmt_env_vars_are_real_settings() -> None:
    fields = {f"DMT_{name.upper()}" for name in Settings.model_fields}
    for _, doc in load_docs():
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            for env in container.get("env", []):
                name = env["name"]
                if name.startswith("DMT_"):
                    assert name in fields | NON_SETTINGS_ENV, f"{name} is not a Settings field"


def test_services_select_their_pods_and_ports() -> None:
    for name, target in (("dmt-proxy", "dmt-proxy"), ("dmt-models", "dmt-models")):
        svc = find("Service", name)
        pod = find("Deployment", target)["spec"]["template"]
        assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        port_names = {p["name"] for c in pod["spec"]["containers"] for p in c["ports"]}
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in port_names


def test_models_service_ports_match_the_launcher() -> None:
    from dmt_proxy.upstream.local_models import LOCAL_MODELS
    from dmt_proxy.upstream.models import local_model_port

    settings = Settings.from_env({})
    dep = find("Deployment", "dmt-models")
    env = {e["name"]: e["value"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    served = env["DMT_SERVE_MODELS"].split()
    assert set(served) <= set(LOCAL_MODELS)
    ports = {p["port"] for p in find("Service", "dmt-models")["spec"]["ports"]}
    assert ports == {local_model_port(settings, name) for name in served}


def test_hpa_targets_the_deployment() -> None:
    hpa = find("HorizontalPodAutoscaler", "dmt-proxy")
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Deployment", "dmt-proxy")
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


def test_servicemonitor_scrapes_the_proxy_service() -> None:
    sm = find("ServiceMonitor", "dmt-proxy")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    svc = find("Service", "dmt-proxy")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert "jobLabel" not in sm["spec"]  # job = Service name = "dmt-proxy", as the rules expect
    svc_ports = {p["name"] for p in svc["spec"]["ports"]}
    for endpoint in sm["spec"]["endpoints"]:
        assert endpoint["port"] in svc_ports and endpoint["path"] == "/metrics"
