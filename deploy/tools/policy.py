"""Security and rollout properties of the rendered Kubernetes manifests and the compose files
(issue 16). Exit 1 naming every violation.

  policy.py kube RENDERED.yaml...     the output of `kubectl kustomize`
  policy.py compose FILE.yaml...      compose files, each on its own, then the configs and
                                      secrets they name across all of them
  policy.py self-test RENDERED.yaml   each rule must reject a manifest broken on purpose
"""
import copy
import os
import re
import sys

import yaml

PINNED = re.compile(r"^[^@\s]+:[^@:/\s]+@sha256:[0-9a-f]{64}$")
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicaSet", "Pod"}


def pod_spec(obj):
    spec = obj.get("spec", {})
    if obj["kind"] == "Pod":
        return spec
    if obj["kind"] == "CronJob":
        return spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec", {})
    return spec.get("template", {}).get("spec", {})


def image_problems(where, image):
    out = []
    if not PINNED.match(image or ""):
        out.append(f"{where}: image {image!r} is not pinned as name:tag@sha256:<digest>")
    if ":latest" in (image or ""):
        out.append(f"{where}: image {image!r} uses :latest")
    return out


def container_problems(where, pod, c):
    out = image_problems(where, c.get("image"))
    psc, sc = pod.get("securityContext", {}), c.get("securityContext", {})
    if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
        out.append(f"{where}: runAsNonRoot is not true")
    uid = sc.get("runAsUser", psc.get("runAsUser"))
    if uid in (None, 0):
        out.append(f"{where}: no numeric non-root runAsUser")
    if sc.get("readOnlyRootFilesystem") is not True:
        out.append(f"{where}: readOnlyRootFilesystem is not true")
    if sc.get("allowPrivilegeEscalation") is not False:
        out.append(f"{where}: allowPrivilegeEscalation is not false")
    if sc.get("privileged"):
        out.append(f"{where}: privileged")
    caps = sc.get("capabilities", {})
    if "ALL" not in caps.get("drop", []):
        out.append(f"{where}: capabilities do not drop ALL")
    if caps.get("add"):
        out.append(f"{where}: adds capabilities {caps['add']}")
    seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
    if seccomp != "RuntimeDefault":
        out.append(f"{where}: seccompProfile is {seccomp!r}, not RuntimeDefault")
    res = c.get("resources", {})
    for kind in ("requests", "limits"):
        for r in ("cpu", "memory"):
            if r not in res.get(kind, {}):
                out.append(f"{where}: no {kind}.{r}")
    return out


def workload_problems(obj):
    name = f"{obj['kind']}/{obj['metadata']['name']}"
    pod = pod_spec(obj)
    out = []
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            out.append(f"{name}: {flag}")
    if any("hostPath" in v for v in pod.get("volumes", [])):
        out.append(f"{name}: a hostPath volume")
    if pod.get("automountServiceAccountToken") is not False:
        out.append(f"{name}: automountServiceAccountToken is not false")
    for c in pod.get("initContainers", []) + pod.get("containers", []):
        out += container_problems(f"{name} container {c['name']}", pod, c)
    return out


def weir_config(objs):
    for o in objs:
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("weir-config"):
            return yaml.safe_load(o["data"]["weir.yaml"])
    return None


def seconds(text):
    m = re.fullmatch(r"(\d+)(ms|s|m)", str(text))
    if not m:
        raise ValueError(f"duration {text!r}")
    n, unit = int(m.group(1)), m.group(2)
    return {"ms": n / 1000, "s": n, "m": n * 60}[unit]


def rollout_problems(objs):
    out = []
    deps = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "weir"]
    if len(deps) != 1:
        return ["no Deployment weir"]
    d = deps[0]
    spec, pod = d["spec"], pod_spec(d)
    if spec.get("replicas") != 3:
        out.append(f"Deployment/weir: replicas {spec.get('replicas')}, want 3")
    ru = spec.get("strategy", {}).get("rollingUpdate", {})
    if ru.get("maxUnavailable") != 0 or ru.get("maxSurge") != 1:
        out.append(f"Deployment/weir: rollingUpdate {ru}, want maxUnavailable 0, maxSurge 1")
    c = pod["containers"][0]
    probes = {p: c.get(p, {}).get("httpGet", {}).get("path") for p in
              ("startupProbe", "readinessProbe", "livenessProbe")}
    want = {"startupProbe": "/healthz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    if probes != want:
        out.append(f"Deployment/weir: probes {probes}, want {want}")
    pre = c.get("lifecycle", {}).get("preStop", {})
    pre_s = pre.get("sleep", {}).get("seconds", 0) if pre else None
    if not pre:
        out.append("Deployment/weir: no preStop")
    cfg = weir_config(objs)
    if cfg is None:
        return out + ["no weir-config ConfigMap"]
    server = cfg.get("server", {})
    delay = seconds(server.get("shutdown_delay", "0s"))
    timeout = seconds(server.get("shutdown_timeout", "10s"))
    if delay <= 0:
        out.append("weir.yaml: server.shutdown_delay is 0: endpoints cannot drain")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if grace <= (pre_s or 0) + delay + timeout:
        out.append(f"Deployment/weir: terminationGracePeriodSeconds {grace} <= preStop {pre_s}"
                   f" + shutdown_delay {delay} + shutdown_timeout {timeout}")
    if cfg.get("management", {}).get("runtime_mutations") is not False:
        out.append("weir.yaml: management.runtime_mutations is not false (several replicas)")
    pdbs = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    if not any(p["spec"].get("minAvailable") == 2 for p in pdbs):
        out.append("no PodDisruptionBudget with minAvailable 2")
    if not any(o["kind"] == "HorizontalPodAutoscaler" for o in objs):
        out.append("no HorizontalPodAutoscaler")
    return out


def exposure_problems(objs):
    out = []
    for o in objs:
        name = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] == "Service" and o["metadata"]["name"] != "weir":
            if o["spec"].get("type", "ClusterIP") != "ClusterIP":
                out.append(f"{name}: type {o['spec']['type']}, want ClusterIP")
        if o["kind"] == "Ingress":
            rules = o["spec"].get("rules", [])
            backends = [p["backend"]["service"] for r in rules for p in r.get("http", {}).get("paths", [])]
            if "defaultBackend" in o["spec"]:
                backends.append(o["spec"]["defaultBackend"].get("service", {}))
            for b in backends:
                if b.get("name") != "weir" or b.get("port", {}).get("name") not in ("http", None) \
                        or b.get("port", {}).get("number") not in (None, 80):
                    out.append(f"{name}: exposes {b}; only the data plane may have an Ingress")
            if not o["spec"].get("tls"):
                out.append(f"{name}: no TLS")
        if o["kind"] == "Secret":
            placeholder = o["metadata"].get("annotations", {}).get("weir.example/placeholder")
            values = list(o.get("stringData", {}).values()) + list(o.get("data", {}).values())
            if placeholder != "true" or any(values):
                out.append(f"{name}: a Secret with a value; the kit ships empty placeholders only")
    return out


def netpol_problems(objs):
    pols = [o for o in objs if o["kind"] == "NetworkPolicy"]
    if not pols:
        return ["no NetworkPolicy"]
    out = []
    if not any(p["spec"].get("podSelector") == {} and p["spec"].get("policyTypes") == ["Ingress"]
               and not p["spec"].get("ingress") for p in pols):
        out.append("no default-deny ingress NetworkPolicy")
    allowed = {}
    for p in pols:
        for rule in p["spec"].get("ingress", []):
            ports = [x.get("port") for x in rule.get("ports", [])] or ["any"]
            for src in rule.get("from", []) or [{"anywhere": True}]:
                for port in ports:
                    allowed.setdefault(port, []).append(src)
    if "any" in allowed:
        out.append("a NetworkPolicy allows every port")
    for src in allowed.get("http", []):
        ns = src.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name")
        if ns != "ingress-nginx":
            out.append(f"public port open to {src}, want the ingress controller's namespace only")
    for src in allowed.get("management", []):
        ns = src.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name")
        console = src.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component")
        if ns != "monitoring" and not ("namespaceSelector" not in src and console == "console"):
            out.append(f"management port open to {src}, want the monitoring namespace only")
    if not allowed.get("http"):
        out.append("no NetworkPolicy admits the ingress controller")
    return out


def kube_problems(objs):
    out = []
    for o in objs:
        if o["kind"] in WORKLOADS:
            out += workload_problems(o)
    return out + rollout_problems(objs) + exposure_problems(objs) + netpol_problems(objs)


def compose_problems(name, doc):
    out = []
    for svc, s in (doc.get("services") or {}).items():
        where = f"{name}: service {svc}"
        if "image" in s and "build" not in s and s["image"] != "weir:local":
            out += image_problems(where, s["image"])
        if ":latest" in str(s.get("image", "")):
            out.append(f"{where}: :latest")
        for p in s.get("ports", []):
            p = str(p)
            if not p.startswith("127.0.0.1:"):
                out.append(f"{where}: port {p} published beyond loopback")
            if p.split(":")[-1].split("/")[0] in ("9090", "6379"):
                out.append(f"{where}: management or Redis published on the host ({p})")
        if svc in ("redis",) and s.get("ports"):
            out.append(f"{where}: Redis published")
        if "image" in s and s.get("privileged"):
            out.append(f"{where}: privileged")
    return out


def compose_refs_problems(paths):
    """Across the compose files (the base and its overlays): every config or secret a service
    names is defined, and every file a config names exists (secret files are created by the
    operator, deploy/README.md)."""
    defined = {"configs": set(), "secrets": set()}
    out = []
    docs = [(p, load_all(p)[0]) for p in paths]
    for path, doc in docs:
        for kind in defined:
            for name, spec in (doc.get(kind) or {}).items():
                defined[kind].add(name)
                f = (spec or {}).get("file")
                if kind == "configs" and f and not os.path.isfile(os.path.join(os.path.dirname(path), f)):
                    out.append(f"{path}: config {name}: no file {f}")
    for path, doc in docs:
        for svc, s in (doc.get("services") or {}).items():
            for kind in defined:
                for ref in s.get(kind, []):
                    name = ref["source"] if isinstance(ref, dict) else ref
                    if name not in defined[kind]:
                        out.append(f"{path}: service {svc}: {kind[:-1]} {name} is not defined")
    return out


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


BREAKAGES = [
    ("root user", lambda o: o["kind"] == "Deployment" and o["metadata"]["name"] == "weir",
     lambda o: pod_spec(o)["containers"][0]["securityContext"].update(runAsUser=0)),
    ("writable root", lambda o: o["kind"] == "Deployment" and o["metadata"]["name"] == "weir",
     lambda o: pod_spec(o)["containers"][0]["securityContext"].update(readOnlyRootFilesystem=False)),
    ("keeps capabilities", lambda o: o["kind"] == "Deployment" and o["metadata"]["name"] == "weir",
     lambda o: pod_spec(o)["containers"][0]["securityContext"]["capabilities"].update(drop=["NET_RAW"])),
    ("latest image", lambda o: o["kind"] == "Deployment" and o["metadata"]["name"] == "weir",
     lambda o: pod_spec(o)["containers"][0].update(image="registry.example.invalid/weir:latest")),
    ("Ingress to management", lambda o: o["kind"] == "Ingress",
     lambda o: o["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"].update(
         name="weir-management", port={"name": "management"})),
    ("management as NodePort", lambda o: o["kind"] == "Service" and o["metadata"]["name"] == "weir-management",
     lambda o: o["spec"].update(type="NodePort")),
    ("no NetworkPolicy", lambda o: o["kind"] == "NetworkPolicy", None),
    ("management open to all", lambda o: o["metadata"]["name"] == "weir-management-from-monitoring",
     lambda o: o["spec"]["ingress"][0].update({"from": [{"namespaceSelector": {}}]})),
    ("maxUnavailable 1", lambda o: o["kind"] == "Deployment" and o["metadata"]["name"] == "weir",
     lambda o: o["spec"]["strategy"]["rollingUpdate"].update(maxUnavailable=1)),
    ("short grace", lambda o: o["kind"] == "Deployment" and o["metadata"]["name"] == "weir",
     lambda o: pod_spec(o).update(terminationGracePeriodSeconds=10)),
    ("a real secret", lambda o: o["kind"] == "Secret",
     lambda o: o["stringData"].update({"admin-token": "s3cr3t"})),
]


def self_test(objs):
    if kube_problems(objs):
        return ["the unbroken manifests already fail"]
    failures = []
    for what, select, change in BREAKAGES:
        broken = []
        for o in copy.deepcopy(objs):
            if select(o):
                if change is None:
                    continue
                change(o)
            broken.append(o)
        if not kube_problems(broken):
            failures.append(f"self-test: {what} was not rejected")
    return failures


def main(argv):
    if len(argv) < 2 or argv[0] not in ("kube", "compose", "self-test"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, paths = argv[0], argv[1:]
    problems = []
    if mode == "compose":
        for path in paths:
            problems += compose_problems(path, load_all(path)[0])
        problems += compose_refs_problems(paths)
    else:
        check = kube_problems if mode == "kube" else self_test
        for path in paths:
            problems += [f"{path}: {p}" for p in check(load_all(path))]
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
