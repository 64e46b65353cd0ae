#!/usr/bin/env python3
"""Checks the Dockerfile and the Kubernetes manifests in deploy/ against what the
binary actually serves and reads. No image is built and no cluster is needed:

- the files parse (YAML, TOML, the Dockerfile's instructions);
- the Dockerfile is multi-stage, runs as a non-root user, copies the binaries the
  configs start, exposes the ports the configs listen on, and points
  MCP_WARDEN_CONFIG at the config it copies;
- the Deployment mounts the ConfigMap where MCP_WARDEN_CONFIG says, fills every
  environment variable the config names (`*_env` keys) from the Secret, names
  container ports that are the config's listen ports, probes /healthz and /readyz,
  waits longer than gateway.drain_timeout before killing a pod, and runs as the
  Dockerfile's user; the Service and the PodDisruptionBudget select its pods;
- then, for real: the locally built binaries (target/debug, or WARDEN_BIN_DIR)
  are started with each config (the ConfigMap's and the image's), found through
  MCP_WARDEN_CONFIG as in the container, with the Deployment's variables set;
  `check` passes, every probe the Deployment names answers 200 on the port it
  names, the image's demo answers an MCP initialize and lists its tools, and
  SIGTERM ends the process with exit code 0.

Usage: scripts/check-deploy.py   (after `cargo build -p mcp-warden`)
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy" / "kubernetes"
BIN_DIR = Path(os.environ.get("WARDEN_BIN_DIR", ROOT / "target" / "debug"))
# How long a started gateway may take to report its address and become ready.
PATIENCE = 60

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
    return ok


# --- the Dockerfile ---------------------------------------------------------------


def dockerfile_instructions(text):
    """(instruction, arguments) per logical line, continuations joined."""
    out, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        current += " " + stripped.rstrip("\\").strip()
        if not stripped.endswith("\\"):
            word, _, rest = current.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            current = ""
    return out


def read_dockerfile():
    steps = dockerfile_instructions((ROOT / "Dockerfile").read_text())
    stages = []
    for word, args in steps:
        if word == "FROM":
            stages.append({"from": args, "steps": []})
        elif stages:
            stages[-1]["steps"].append((word, args))
    check(len(stages) >= 2, "Dockerfile: multi-stage (a build stage and a runtime stage)")
    build, runtime = stages[0], stages[-1]
    check(build["from"].split()[0].startswith("rust:"), "Dockerfile: builds on the Rust toolchain image")
    check(
        not runtime["from"].split()[0].startswith("rust:"),
        "Dockerfile: the runtime stage is not the toolchain image",
    )
    built = set()
    for word, args in build["steps"]:
        if word == "RUN" and "cargo build" in args:
            check("--release" in args and "--locked" in args, "Dockerfile: a locked release build")
            built |= set(re.findall(r"--bin\s+(\S+)", args))
    info = {"binaries": {}, "expose": set(), "env": {}, "user": None, "entrypoint": None, "files": {}}
    for word, args in runtime["steps"]:
        if word == "COPY":
            parts = args.split()
            if parts[0].startswith("--from="):
                src, dest = parts[1], parts[2]
                name = Path(src).name
                check(name in built, f"Dockerfile: copies {name}, which the build stage builds")
                info["binaries"][dest] = name
            else:
                info["files"][parts[1]] = parts[0]
        elif word == "EXPOSE":
            info["expose"] |= {int(p.split("/")[0]) for p in args.split()}
        elif word == "ENV":
            key, _, value = args.partition("=")
            info["env"][key.strip()] = value.strip()
        elif word == "USER":
            info["user"] = args.split(":")[0]
        elif word == "ENTRYPOINT":
            info["entrypoint"] = json.loads(args)
    user = info["user"]
    check(user is not None and user not in ("0", "root"), f"Dockerfile: runs as a non-root user ({user})")
    check(
        info["entrypoint"] is not None and info["entrypoint"][0] in info["binaries"],
        "Dockerfile: the entrypoint is a copied binary",
    )
    config = info["env"].get("MCP_WARDEN_CONFIG")
    check(config in info["files"], f"Dockerfile: MCP_WARDEN_CONFIG ({config}) is the config it copies")
    info["config_path"] = config
    info["config_source"] = ROOT / info["files"].get(config, "missing")
    return info


# --- the manifests ----------------------------------------------------------------


def read_manifests():
    docs = {}
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and "kind" in doc:
                docs.setdefault(doc["kind"], []).append((path.name, doc))
    kustomize = docs.get("Kustomization", [(None, {"resources": []})])[0][1]
    listed = set(kustomize.get("resources", []))
    for kind, found in docs.items():
        for name, _ in found:
            if kind not in ("Kustomization", "Secret"):
                check(name in listed, f"kustomization.yaml lists {name}")
    for kind in ("Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "Secret"):
        check(kind in docs, f"deploy/kubernetes has a {kind}")
    return {kind: found[0][1] for kind, found in docs.items()}


def port_of(listen):
    return int(listen.rsplit(":", 1)[1])


def env_names(table):
    """The environment variables a config names: every `*_env` value."""
    names = []
    if isinstance(table, dict):
        for key, value in table.items():
            if key.endswith("_env") and isinstance(value, str):
                names.append(value)
            else:
                names += env_names(value)
    elif isinstance(table, list):
        for item in table:
            names += env_names(item)
    return names


def check_manifests(m, docker):
    deployment, configmap = m["Deployment"], m["ConfigMap"]
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e for e in container.get("env", [])}

    # The config file: where MCP_WARDEN_CONFIG says, from the ConfigMap.
    config_path = env.get("MCP_WARDEN_CONFIG", {}).get("value")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    source = None
    for mount in container["volumeMounts"]:
        cm = volumes[mount["name"]].get("configMap")
        if not cm:
            continue
        for item in cm.get("items", []):
            if f"{mount['mountPath']}/{item['path']}" == config_path:
                source = (cm["name"], item["key"])
    check(source is not None, f"Deployment: MCP_WARDEN_CONFIG ({config_path}) is a mounted ConfigMap key")
    check(
        source is not None and source[0] == configmap["metadata"]["name"] and source[1] in configmap["data"],
        "Deployment: the mounted ConfigMap and key exist",
    )
    text = configmap["data"][source[1]] if source else ""
    config = tomllib.loads(text)
    gateway = config.get("gateway", {})

    # Ports: the config's listeners are the container's named ports, and the image's.
    front, admin = port_of(gateway["listen"]), port_of(config["admin"]["listen"])
    check(gateway.get("front") == "http", "ConfigMap: the HTTP front is the default front")
    check(gateway["listen"].startswith("0.0.0.0:"), "ConfigMap: the front listens on every interface")
    check(ports.get("http") == front, f"Deployment: port 'http' is gateway.listen's ({front})")
    check(ports.get("admin") == admin, f"Deployment: port 'admin' is admin.listen's ({admin})")
    check({front, admin} <= docker["expose"], "Dockerfile: EXPOSEs the front and admin ports")

    # Secrets: every variable the config names is set from the Secret.
    secret = m["Secret"]
    for name in env_names(config):
        ref = env.get(name, {}).get("valueFrom", {}).get("secretKeyRef")
        check(
            ref is not None and ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"],
            f"Deployment: {name} (named in the config) comes from the Secret",
        )

    # Probes: the binary's paths, on named ports.
    probes = {}
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container.get(kind)
        if probe is None:
            check(kind == "startupProbe", f"Deployment: has a {kind}")
            continue
        get = probe["httpGet"]
        check(get["port"] in ports, f"Deployment: {kind} asks a named container port ({get['port']})")
        probes[kind] = (get["path"], get["port"])
    check(probes.get("livenessProbe", ("",))[0] == "/healthz", "Deployment: liveness asks /healthz")
    check(probes.get("readinessProbe", ("",))[0] == "/readyz", "Deployment: readiness asks /readyz")

    # Termination: longer than the drain (and preStop's sleep) before SIGKILL.
    drain = parse_duration(gateway.get("drain_timeout", "30s"))
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    sleep = int(pre_stop[-1]) if pre_stop[:1] == ["sleep"] else 0
    grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
    check(
        grace > drain + sleep,
        f"Deployment: terminationGracePeriodSeconds ({grace}) > drain_timeout ({drain}) + preStop ({sleep})",
    )

    # Who runs it: the Dockerfile's user, never root.
    security = pod["spec"].get("securityContext", {})
    check(security.get("runAsNonRoot") is True, "Deployment: runAsNonRoot")
    check(str(security.get("runAsUser")) == docker["user"], "Deployment: runs as the Dockerfile's USER")

    # Selection: the Service and the PodDisruptionBudget find the pods.
    labels = pod["metadata"]["labels"]
    service, pdb = m["Service"], m["PodDisruptionBudget"]
    check(
        service["spec"]["selector"].items() <= labels.items(), "Service: its selector matches the pods"
    )
    for p in service["spec"]["ports"]:
        check(p["targetPort"] in ports, f"Service: targetPort {p['targetPort']} is a container port")
    check(
        pdb["spec"]["selector"]["matchLabels"].items() <= labels.items(),
        "PodDisruptionBudget: its selector matches the pods",
    )
    check(
        deployment["spec"]["selector"]["matchLabels"].items() <= labels.items(),
        "Deployment: its selector matches its pods",
    )
    # Every upstream program is in the image.
    for up in config.get("upstream", []):
        if "command" in up:
            check(up["command"][0] in docker["binaries"], f"ConfigMap: upstream {up['name']} runs a binary the image has")
    return {
        "config": text,
        "config_path": config_path,
        "env": {n: e for n, e in env.items()},
        "probes": probes,
        "ports": {"http": front, "admin": admin},
    }


def parse_duration(text):
    n, unit = int(text[:-1]), text[-1]
    return n * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


# --- running the binary with a config ---------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, headers=None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def localised(text, tmp, ports, binaries):
    """A config made runnable here: loopback ports, image paths → local ones."""
    config = text.replace("0.0.0.0:", "127.0.0.1:")
    config = config.replace(f":{ports['http_image']}\"", f":{ports['http']}\"")
    config = config.replace(f":{ports['admin_image']}\"", f":{ports['admin']}\"")
    for dest, name in binaries.items():
        config = config.replace(f'"{dest}"', json.dumps(str(BIN_DIR / name)))
    config = config.replace("/var/lib/mcp-warden", str(tmp))
    return config


def run_config(label, text, config_path, env_names_values, probes, ports, binaries, demo=False):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        local = {"http": free_port(), "admin": free_port(),
                 "http_image": ports["http"], "admin_image": ports["admin"]}
        path = tmp / Path(config_path).name
        path.write_text(localised(text, tmp, local, binaries))
        env = dict(os.environ, **env_names_values)
        env["MCP_WARDEN_CONFIG"] = str(path)
        env.setdefault("RUST_LOG", "warn")
        warden = str(BIN_DIR / "mcp-warden")
        done = subprocess.run([warden, "check"], env=env, capture_output=True, text=True)
        check(done.returncode == 0, f"{label}: `mcp-warden check` finds the config through MCP_WARDEN_CONFIG and passes"
              + ("" if done.returncode == 0 else f"\n{done.stdout}{done.stderr}"))
        proc = subprocess.Popen([warden, "run"], env=env,
                                stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        listening = threading.Event()
        log = []

        def read():
            for line in proc.stderr:
                log.append(line)
                if line.startswith("mcp-warden: listening on"):
                    listening.set()

        threading.Thread(target=read, daemon=True).start()
        try:
            if not check(listening.wait(PATIENCE), f"{label}: `mcp-warden run` serves the HTTP front"):
                print("".join(log))
                return
            for kind, (probe_path, port_name) in probes.items():
                url = f"http://127.0.0.1:{local[port_name]}{probe_path}"
                deadline = time.monotonic() + PATIENCE
                status = None
                while time.monotonic() < deadline:
                    status, body, _ = http("GET", url)
                    if status == 200:
                        break
                    time.sleep(0.2)
                check(status == 200, f"{label}: {kind} {probe_path} on port '{port_name}' answers 200")
            if demo:
                front = f"http://127.0.0.1:{local['http']}/mcp"
                headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
                init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "check-deploy", "version": "1"}}}
                status, body, got = http("POST", front, json.dumps(init).encode(), headers)
                session = {k.lower(): v for k, v in got.items()}.get("mcp-session-id")
                check(status == 200 and session, f"{label}: the demo answers an MCP initialize")
                headers["Mcp-Session-Id"] = session or ""
                listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
                status, body, _ = http("POST", front, json.dumps(listed).encode(), headers)
                names = [t["name"] for t in json.loads(body)["result"]["tools"]] if status == 200 else []
                check("notes.create_note" in names, f"{label}: the demo lists its tools ({', '.join(names)})")
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(PATIENCE)
            except subprocess.TimeoutExpired:
                code = None
            check(code == 0, f"{label}: SIGTERM drains and exits 0 (got {code})")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def main():
    docker = read_dockerfile()
    manifests = read_manifests()
    k8s = check_manifests(manifests, docker)
    for name in ("mcp-warden", "warden-demo-notes"):
        if not (BIN_DIR / name).exists():
            print(f"FAIL {BIN_DIR / name} is missing: run `cargo build -p mcp-warden` first")
            return 1
    # The Deployment's variables, with stand-in values of the right shape.
    values = {}
    for name, entry in k8s["env"].items():
        if "value" in entry:
            values[name] = entry["value"]
        else:
            values[name] = "stand-in-secret-" + name.lower()
    with tempfile.TemporaryDirectory() as tmp:
        # The real one is a PostgreSQL URL; any store URL shows the variable is read.
        values["WARDEN_STORE_URL"] = f"sqlite://{tmp}/warden.db"
        values.pop("MCP_WARDEN_CONFIG", None)
        run_config("ConfigMap", k8s["config"], k8s["config_path"], values, k8s["probes"],
                   k8s["ports"], docker["binaries"])
    image_text = docker["config_source"].read_text()
    image = tomllib.loads(image_text)
    image_ports = {"http": port_of(image["gateway"]["listen"]), "admin": port_of(image["admin"]["listen"])}
    check(set(image_ports.values()) <= docker["expose"], "Dockerfile: EXPOSEs the image config's ports")
    for up in image.get("upstream", []):
        check(up["command"][0] in docker["binaries"], f"image config: upstream {up['name']} runs a binary the image has")
    run_config("image", image_text, docker["config_path"], {}, k8s["probes"], image_ports,
               docker["binaries"], demo=True)
    print(f"\n{len(failures)} failure(s)" if failures else "\nall deploy checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
