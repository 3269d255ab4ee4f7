"""The container image (deploy/Dockerfile) and the Kubernetes manifests (deploy/k8s/).

- deploy/container-build.sh, the script the Dockerfile's build stage runs, is run here on
  the host: NATIVE=0 build, install into a prefix, only the runtime stage's shared
  libraries; the installed binary with the installed config serves a request.
- With podman, the image is built and run: one request, readiness HEALTHCHECK, non-root
  user, SIGTERM through tini (exit 0). No registry is reachable from these machines, so the
  Debian base is made locally with mmdebstrap from the host's apt sources when no base image
  is present (GEMMAD_CONTAINER_BASE names another). Where podman or mmdebstrap is missing,
  the test says SKIP and why.
- The manifests validate against the Kubernetes 1.30 schemas (strict: unknown fields fail;
  kubernetes-validate, which ships them); a deliberately broken copy must fail; the
  ConfigMap's gemmad.conf starts a real server whose KV pool is the size the Deployment's
  sizing comment assumes.
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import time

import pytest
import requests

from conftest import BIN, MODEL, ROOT

K8S = os.path.join(ROOT, "deploy", "k8s")
DOCKERFILE = os.path.join(ROOT, "deploy", "Dockerfile")
BUILD_SH = os.path.join(ROOT, "deploy", "container-build.sh")
K8S_VERSION = "1.30.0"


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_health(url, proc, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return True
        except requests.RequestException:
            pass
        time.sleep(0.2)
    return False


def _one_chat(url):
    r = requests.post(url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= 1


def test_dockerfile_runs_the_build_script():
    text = open(DOCKERFILE).read()
    assert "container-build.sh --build-debs" in text
    assert "container-build.sh --runtime-debs" in text
    assert re.search(r"^RUN .*bash deploy/container-build\.sh /opt/gemmad$", text, re.M)
    assert re.search(r'^ENTRYPOINT \["/usr/bin/tini", "--", "/opt/gemmad/bin/gemmad"\]', text,
                     re.M)
    assert re.search(r"^USER 10001", text, re.M) and "HEALTHCHECK" in text and "/health" in text


def test_container_build_script_on_host(tmp_path):
    if not os.path.exists(MODEL):
        pytest.skip("bundled model missing (make model)")
    prefix = tmp_path / "opt"
    env = dict(os.environ, BUILD=os.path.join(ROOT, "build", "portable"))
    p = subprocess.run(["bash", BUILD_SH, str(prefix)], env=env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    for f in ["bin/gemmad", "bin/gemmad-cli", "etc/gemmad.conf"]:
        assert (prefix / f).exists(), f
    port = _free_port()
    proc = subprocess.Popen([str(prefix / "bin" / "gemmad"), "--config",
                             str(prefix / "etc" / "gemmad.conf"), "--model", MODEL, "--host",
                             "127.0.0.1", "--port", str(port), "--threads", "1", "--kv-tokens",
                             "8192"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        assert _wait_health(url, proc), proc.stderr.read().decode()[-2000:] \
            if proc.poll() is not None else "not healthy"
        _one_chat(url)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


# ---- the image -------------------------------------------------------------------------------

def _podman():
    podman = shutil.which("podman")
    if not podman:
        pytest.skip("SKIP container image: podman not installed (deploy/setup-deps.sh)")
    # This machine kind lacks CAP_SYS_RESOURCE (crun cannot raise rlimits) and mixes cgroup
    # versions (crun refuses): runc with rlimits at or below the current ones works.
    base = [podman]
    if shutil.which("runc"):
        base += ["--runtime", "runc"]
    return base


def _limits():
    import resource
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 4096)
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[0], 4096)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def _base_image(pm, tmp_path):
    """A Debian bookworm base image: GEMMAD_CONTAINER_BASE, one already here, one pulled, or
    one made with mmdebstrap from the host's apt sources."""
    want = os.environ.get("GEMMAD_CONTAINER_BASE")
    if want:
        return want
    for name in ["localhost/gemmad-base:bookworm", "docker.io/library/debian:bookworm-slim"]:
        if subprocess.run(pm + ["image", "exists", name], timeout=60).returncode == 0:
            return name
    p = subprocess.run(pm + ["pull", "-q", "docker.io/library/debian:bookworm-slim"],
                       capture_output=True, text=True, timeout=120)
    if p.returncode == 0:
        return "docker.io/library/debian:bookworm-slim"
    mm = shutil.which("mmdebstrap")
    if not mm:
        pytest.skip("SKIP container image: no base image, no registry reachable "
                    f"({p.stderr.strip()[-200:]}) and no mmdebstrap to make one")
    tar = tmp_path / "base.tar"
    sources = "/etc/apt/sources.list.d/debian.sources"
    cmd = [mm, "--variant=apt", "--quiet", "bookworm", str(tar)]
    stdin = None
    if os.path.exists(sources):
        cmd.append("-")
        stdin = open(sources)
    b = subprocess.run(cmd, stdin=stdin, capture_output=True, text=True, timeout=900)
    if b.returncode != 0:
        pytest.skip("SKIP container image: mmdebstrap could not make a base: "
                    + b.stderr.strip()[-300:])
    subprocess.run(pm + ["import", str(tar), "localhost/gemmad-base:bookworm"], check=True,
                   capture_output=True, timeout=300)
    return "localhost/gemmad-base:bookworm"


def test_container_image(tmp_path):
    if os.environ.get("GEMMAD_TEST_CONTAINER") == "0":
        pytest.skip("SKIP container image: GEMMAD_TEST_CONTAINER=0")
    if not os.path.exists(MODEL):
        pytest.skip("bundled model missing (make model)")
    pm = _podman()
    info = subprocess.run(pm + ["info"], capture_output=True, text=True, timeout=120)
    if info.returncode != 0:
        pytest.skip("SKIP container image: podman cannot run here: " + info.stderr[-300:])
    base = _base_image(pm, tmp_path)
    tag = "localhost/gemmad:test"
    # --format docker: the OCI image format has no HEALTHCHECK.
    b = subprocess.run(pm + ["build", "--format", "docker", "--network", "host"] + _limits() +
                       ["--build-arg", f"BASE={base}", "--build-arg", "GEMMAD_VERSION=test",
                        "-f", DOCKERFILE, "-t", tag, ROOT],
                       capture_output=True, text=True, timeout=1500)
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-2000:]
    name = f"gemmad-test-{os.getpid()}"
    port = _free_port()
    model = os.path.realpath(MODEL)
    r = subprocess.run(pm + ["run", "-d", "--name", name, "--network", "host"] + _limits() +
                       ["-v", f"{model}:/models/model.gguf:ro", "-e", "GEMMAD_HOST=127.0.0.1",
                        "-e", f"GEMMAD_PORT={port}", "-e", "GEMMAD_THREADS=1", "-e",
                        "GEMMAD_KV_TOKENS=8192", tag], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0 and "OCI" in r.stderr:
        pytest.skip("SKIP container run: the OCI runtime cannot start containers here: "
                    + r.stderr.strip()[-300:])
    assert r.returncode == 0, r.stderr
    try:
        url = f"http://127.0.0.1:{port}"
        assert _wait_health(url, None, 120), subprocess.run(
            pm + ["logs", name], capture_output=True, text=True).stderr[-2000:]
        _one_chat(url)
        hc = subprocess.run(pm + ["healthcheck", "run", name], capture_output=True, text=True,
                            timeout=60)
        assert hc.returncode == 0, hc.stdout + hc.stderr
        uid = subprocess.run(pm + ["exec", name, "id", "-u"], capture_output=True, text=True,
                             timeout=60)
        assert uid.stdout.strip() == "10001", uid.stdout + uid.stderr
        # SIGTERM reaches gemmad through tini: it drains and exits 0.
        subprocess.run(pm + ["stop", "-t", "30", name], capture_output=True, timeout=90)
        code = subprocess.run(pm + ["inspect", name, "--format", "{{.State.ExitCode}}"],
                              capture_output=True, text=True, timeout=60).stdout.strip()
        logs = subprocess.run(pm + ["logs", name], capture_output=True, text=True,
                              timeout=60).stderr
        assert code == "0", logs[-2000:]
        assert "signal 15" in logs and "exit 0" in logs
    finally:
        subprocess.run(pm + ["rm", "-f", name], capture_output=True, timeout=120)


# ---- the manifests ---------------------------------------------------------------------------

def _validate(paths):
    try:
        import kubernetes_validate  # noqa: F401
    except ImportError:
        pytest.fail("kubernetes-validate missing: pip install -r tests/requirements.txt")
    exe = shutil.which("kubernetes-validate")
    cmd = [exe] if exe else ["python3", "-m", "kubernetes_validate"]
    return subprocess.run(cmd + ["-k", K8S_VERSION, "--strict", "--no-warn"] + list(paths),
                          capture_output=True, text=True, timeout=300)


def test_k8s_manifests_validate():
    files = sorted(glob.glob(os.path.join(K8S, "*.yaml")))
    kinds = set()
    for f in files:
        kinds |= set(re.findall(r"^kind:\s*(\S+)", open(f).read(), re.M))
    assert {"Deployment", "Service", "PodDisruptionBudget", "ConfigMap",
            "HorizontalPodAutoscaler"} <= kinds, kinds
    p = _validate(files)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("passed") >= len(files), p.stdout


@pytest.mark.parametrize("breakage", [
    ("terminationGracePeriodSeconds: 60", "terminationGracePeriodSeconds: sixty"),
    ("          readinessProbe:", "          readinesProbe:"),
    ("  replicas: 3", "  replicas: [3]"),
])
def test_k8s_broken_manifest_fails(tmp_path, breakage):
    text = open(os.path.join(K8S, "deployment.yaml")).read()
    assert breakage[0] in text
    bad = tmp_path / "deployment.yaml"
    bad.write_text(text.replace(breakage[0], breakage[1], 1))
    p = _validate([str(bad)])
    assert p.returncode != 0, f"a broken manifest validated: {breakage[1]}\n{p.stdout}"


def _configmap_conf():
    import yaml
    doc = yaml.safe_load(open(os.path.join(K8S, "configmap.yaml")))
    return doc["data"]["gemmad.conf"]


def test_k8s_settings_agree(tmp_path):
    import yaml
    dep = yaml.safe_load(open(os.path.join(K8S, "deployment.yaml")))
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    conf = dict(re.findall(r"^(\w+)\s*=\s*(\S+)", _configmap_conf(), re.M))
    pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pod["terminationGracePeriodSeconds"] > pre_stop + float(conf["drain_timeout_s"])
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    assert c["livenessProbe"]["httpGet"]["path"] == "/live"
    assert int(conf["threads"]) <= int(c["resources"]["requests"]["cpu"])
    # The ConfigMap's file is a valid gemmad.conf, and the KV pool it makes is the size the
    # Deployment's sizing comment uses.
    cf = tmp_path / "gemmad.conf"
    cf.write_text(_configmap_conf())
    if not os.path.exists(BIN) or not os.path.exists(MODEL):
        pytest.skip("gemmad or the bundled model missing")
    proc = subprocess.Popen([BIN, "--config", str(cf), "--model", MODEL, "--host", "127.0.0.1",
                             "--port", "0", "--threads", "1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        seen = ""
        deadline = time.time() + 60
        m = None
        while time.time() < deadline and not m:
            line = proc.stderr.readline()
            if not line:
                break
            seen += line
            m = re.search(r"KV pool: .*\(f16, ([\d.]+) MiB\)", line)
        assert m, seen[-2000:]
        comment = open(os.path.join(K8S, "deployment.yaml")).read()
        assert f"= {m.group(1)} MiB (f16)" in comment, f"KV pool is {m.group(1)} MiB"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
