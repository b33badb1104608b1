#!/usr/bin/python3
"""Checks one rendered pdrouter chart (helm-render's output) for scripts/check-helm.

    check_chart.py RENDERED.yaml VALUE-SET PDROUTER OUT-DIR

Parses every manifest, checks the objects' key fields (kinds, probe paths, ports, the grace
period against shutdown_grace_ms, keys only by secretKeyRef, the dashboard copy, selectors), then
writes the ConfigMap's router.yaml to OUT-DIR and runs `PDROUTER --config router.yaml
--check-config` on it: every key the chart writes must be one pdrouter accepts. An lmcache
config is checked that way only when PDROUTER accepts --kv-mode lmcache (said on stdout).
Prints one line per problem and exits 1 when there is any.
"""
import os
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What each value set (tests/helm/values/<name>.yaml; "default" is values.yaml alone) renders.
EXPECT = {
    "default": {"kinds": {"ConfigMap", "Deployment", "Service"}, "kv_mode": "pull",
                "prefill": 1, "decode": 1, "secrets": set()},
    "lmcache-2d": {"kinds": {"ConfigMap", "Deployment", "Service"}, "kv_mode": "lmcache",
                   "prefill": 2, "decode": 2, "secrets": set(), "kv_ready_port": 7500,
                   "replicas": 2},
    "full": {"kinds": {"ConfigMap", "Deployment", "Service", "ServiceMonitor",
                       "HorizontalPodAutoscaler", "PodDisruptionBudget"},
             "kv_mode": "pull", "prefill": 2, "decode": 2,
             "secrets": {"ADMIN_API_KEY", "OPENAI_API_KEY"}, "dashboard": True},
    "dns-policies": {"kinds": {"ConfigMap", "Deployment", "Service"}, "kv_mode": "pull",
                     "prefill": 0, "decode": 1, "secrets": set(),
                     "config": {"prefill_dns": "vllm-prefill.llm.svc.cluster.local:8100",
                                "decode_dns": "vllm-decode.llm.svc.cluster.local:8200",
                                "dns_refresh_ms": 2000, "prefill_policy": "prefix_affinity",
                                "decode_policy": "least_outstanding", "fallback_direct": True,
                                "hide_instance_addresses": True}},
}

problems = []


def check(ok, what):
    if not ok:
        problems.append(what)
    return ok


def one(objs, kind, name_suffix=""):
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    check(len(found) == 1, f"expected one {kind}*{name_suffix}, found {len(found)}")
    return found[0] if found else None


def lmcache_supported(pdrouter):
    probe = subprocess.run(
        [pdrouter, "--check-config", "--kv-mode", "lmcache", "--kv-ready-bind", "tcp://127.0.0.1:7500",
         "--prefill", "127.0.0.1:8100", "--decode", "127.0.0.1:8200"],
        capture_output=True, text=True, timeout=30)
    return probe.returncode == 0


def main():
    rendered, value_set, pdrouter, out_dir = sys.argv[1:5]
    want = EXPECT[value_set]
    with open(rendered) as f:
        objs = [o for o in yaml.safe_load_all(f) if o]
    kinds = {o["kind"] for o in objs}
    dashboard_cms = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")]
    check(kinds == want["kinds"] | ({"ConfigMap"} if dashboard_cms else set()),
          f"kinds {sorted(kinds)}, expected {sorted(want['kinds'])}")
    check(bool(dashboard_cms) == want.get("dashboard", False), "dashboard ConfigMap present or absent as asked")

    config_maps = [o for o in objs if o["kind"] == "ConfigMap" and not o["metadata"]["name"].endswith("-dashboard")]
    check(len(config_maps) == 1, f"one router ConfigMap, found {len(config_maps)}")
    cm = config_maps[0]
    text = cm["data"]["router.yaml"]
    cfg = yaml.safe_load(text)
    dep = one(objs, "Deployment")
    services = [o for o in objs if o["kind"] == "Service" and not o["metadata"]["name"].endswith("-kv-ready")]
    check(len(services) == 1, f"one router Service, found {len(services)}")
    svc = services[0]
    kv_svcs = [o for o in objs if o["kind"] == "Service" and o["metadata"]["name"].endswith("-kv-ready")]
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    check(len(spec["containers"]) == 1, "one container")
    c = spec["containers"][0]

    # The container runs pdrouter on the ConfigMap's file (lmcache: with its pod IP as replica id).
    argv = ["pdrouter", "--config", "/etc/pdrouter/router.yaml"]
    if want["kv_mode"] == "lmcache":
        argv += ["--replica-id", "$(POD_IP)"]
    check(c.get("command", []) + c.get("args", []) == argv,
          f"container runs {c.get('command')} {c.get('args')}")
    mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    check(any(m["mountPath"] == "/etc/pdrouter" and vols.get(n, {}).get("configMap", {}).get("name") ==
              cm["metadata"]["name"] for n, m in mounts.items()),
          "the ConfigMap is mounted at /etc/pdrouter")

    # Ports: the container's http port is the config's port; probes and Service use it by name.
    ports = {p["name"]: p for p in c["ports"]}
    check(ports.get("http", {}).get("containerPort") == cfg["port"],
          f"container port http {ports.get('http')} vs config port {cfg['port']}")
    check(c["livenessProbe"]["httpGet"] == {"path": "/status", "port": "http"},
          f"liveness probe {c['livenessProbe']['httpGet']}")
    check(c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"},
          f"readiness probe {c['readinessProbe']['httpGet']}")
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    check(svc_ports.get("http", {}).get("targetPort") == "http", "Service port http targets http")
    check(svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items(),
          "the Service selects the pods")
    check(dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items(),
          "the Deployment selects its pods")

    # Shutdown: the kubelet waits longer than preStop's sleep plus pdrouter's drain.
    grace_ms = cfg.get("shutdown_grace_ms", 10000)
    sleep_s = 0
    pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
    if pre_stop:
        check(pre_stop[0] == "sleep", f"preStop {pre_stop}")
        sleep_s = int(pre_stop[1])
    check(spec["terminationGracePeriodSeconds"] * 1000 > sleep_s * 1000 + grace_ms,
          f"terminationGracePeriodSeconds {spec['terminationGracePeriodSeconds']} not above "
          f"preStop {sleep_s} s + shutdown_grace_ms {grace_ms}")
    check(dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0, "upgrades keep every pod until its successor is ready")

    # Keys: never in the config, only from Secrets.
    check("admin_api_key" not in cfg and "upstream_api_key" not in cfg, "no key in router.yaml")
    env = {e["name"]: e for e in c.get("env", [])}
    for name in ("ADMIN_API_KEY", "OPENAI_API_KEY"):
        if name in want["secrets"]:
            ref = env.get(name, {}).get("valueFrom", {}).get("secretKeyRef", {})
            check(ref.get("name") and ref.get("key") and "value" not in env[name], f"{name} from a secretKeyRef: {env.get(name)}")
        else:
            check(name not in env, f"{name} set though no Secret was named")

    # Instances and mode.
    check(cfg["kv_mode"] == want["kv_mode"], f"kv_mode {cfg['kv_mode']}")
    check(len(cfg["prefill"]) == want["prefill"] and len(cfg["decode"]) == want["decode"],
          f"{len(cfg['prefill'])} prefill, {len(cfg['decode'])} decode")
    for key, value in want.get("config", {}).items():
        check(cfg.get(key) == value, f"{key} {cfg.get(key)!r}, expected {value!r}")
    check(("dns_refresh_ms" in cfg) == ("prefill_dns" in cfg or "decode_dns" in cfg or "peer_routers_dns" in cfg),
          "dns_refresh_ms only with a DNS name")
    if want["kv_mode"] == "lmcache":
        port = want["kv_ready_port"]
        check(cfg["kv_ready_bind"] == f"tcp://0.0.0.0:{port}", f"kv_ready_bind {cfg['kv_ready_bind']}")
        check(ports.get("kv-ready", {}).get("containerPort") == port, "container port kv-ready")
        check(svc_ports.get("kv-ready", {}) .get("port") == port and svc_ports["kv-ready"]["targetPort"] == "kv-ready",
              "Service port kv-ready")
        for key in ("lmcache_init_ports", "lmcache_alloc_ports"):
            check(len(cfg.get(key, [])) == want["decode"], f"{key}: one per decode instance")
        check(dep["spec"].get("replicas") == want["replicas"], f"replicas {dep['spec'].get('replicas')}")
        # Several replicas: each finds the others through a headless Service over the pods' PULL
        # sockets, and its replica id is its pod IP, what that Service resolves to.
        check(len(kv_svcs) == 1, f"one kv-ready headless Service, found {len(kv_svcs)}")
        for kv in kv_svcs:
            name = kv["metadata"]["name"]
            check(kv["spec"].get("clusterIP") == "None", f"{name} is headless")
            check(kv["spec"].get("publishNotReadyAddresses") is True,
                  f"{name} lists draining pods (they still wait for notifications)")
            check(kv["spec"]["selector"].items() <= pod["metadata"]["labels"].items(), f"{name} selects the pods")
            kv_ports = {p["name"]: p for p in kv["spec"]["ports"]}
            check(kv_ports.get("kv-ready", {}).get("port") == port and kv_ports["kv-ready"].get("targetPort") == "kv-ready",
                  f"{name} port kv-ready")
            check(cfg.get("peer_routers_dns") == f"{name}.llm.svc.cluster.local:{port}",
                  f"peer_routers_dns {cfg.get('peer_routers_dns')!r}, expected the headless Service")
        check(env.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP",
              f"POD_IP from the downward API: {env.get('POD_IP')}")
        check("dns_refresh_ms" in cfg, "dns_refresh_ms set for the peers' name")
    else:
        check(not any(k.startswith(("kv_ready", "lmcache")) for k in cfg), "no lmcache key outside lmcache mode")
        check("kv-ready" not in ports and "kv-ready" not in svc_ports, "no kv-ready port outside lmcache mode")
        check(not kv_svcs and "peer_routers_dns" not in cfg, "no peers outside lmcache mode")

    # The optional objects point at the chart's own.
    hpa = next((o for o in objs if o["kind"] == "HorizontalPodAutoscaler"), None)
    check(("replicas" in dep["spec"]) == (hpa is None), "replicas set exactly when there is no HPA")
    if hpa:
        ref = hpa["spec"]["scaleTargetRef"]
        check(ref["kind"] == "Deployment" and ref["name"] == dep["metadata"]["name"], f"HPA targets {ref}")
        check(hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"], "HPA min <= max")
    pdb = next((o for o in objs if o["kind"] == "PodDisruptionBudget"), None)
    if pdb:
        check(pdb["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items(), "PDB selects the pods")
    sm = next((o for o in objs if o["kind"] == "ServiceMonitor"), None)
    if sm:
        check(sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items(), "ServiceMonitor selects the Service")
        ep = sm["spec"]["endpoints"][0]
        check(ep["port"] == "http" and ep["path"] == "/metrics", f"ServiceMonitor endpoint {ep}")
    for d in dashboard_cms:
        check(d["metadata"]["labels"].get("grafana_dashboard") == "1", "dashboard label grafana_dashboard: \"1\"")
        with open(os.path.join(ROOT, "docs/grafana/pdrouter.json")) as f:
            check(d["data"]["pdrouter.json"] == f.read(), "the dashboard ConfigMap holds docs/grafana/pdrouter.json")

    # Every key the chart writes is one pdrouter accepts.
    path = os.path.join(out_dir, f"router-{value_set}.yaml")
    with open(path, "w") as f:
        f.write(text)
    if cfg["kv_mode"] == "lmcache" and not lmcache_supported(pdrouter):
        print(f"check-helm: {value_set}: router.yaml not run through --check-config: this pdrouter "
              "does not accept --kv-mode lmcache yet")
    else:
        # The container's own arguments, with a sample pod IP for $(POD_IP).
        args = [a.replace("$(POD_IP)", "10.1.2.3") for a in c.get("args", [])[2:]]
        r = subprocess.run([pdrouter, "--config", path, *args, "--check-config"], capture_output=True, text=True,
                           timeout=30, env={k: v for k, v in os.environ.items()
                                            if k not in ("ADMIN_API_KEY", "OPENAI_API_KEY")})
        check(r.returncode == 0 and r.stdout == "configuration OK\n",
              f"pdrouter --check-config on the rendered router.yaml: exit {r.returncode}: {r.stderr.strip()}")

    for p in problems:
        print(f"check-helm: {value_set}: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
