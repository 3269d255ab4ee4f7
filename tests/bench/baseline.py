#!/usr/bin/env python3
"""llama.cpp baselines that run on every host, for tests/bench/bench_engine.py and
tests/bench/bench_server.py.

Natively built llama.cpp does not run everywhere. On a KVM guest whose CPU flags list
amx_int8, llama-cpp-python's default model parameters (extra CPU buffer types: repacked and
AMX weights) crash with SIGSEGV in llama_decode, and a llama-server built with
GGML_NATIVE=ON dies with SIGILL right after its thread pool starts. So each baseline is tried
in order of preference and the first configuration that runs is used; which one ran, and why
the others did not, is printed with the results. A baseline none of whose configurations run
is a reported failure (BaselineFailed), never a missing line.

  * llama-cpp-python runs in a child process (`baseline.py worker ...`), so a crash kills the
    child and not the benchmark: first with the library's defaults, then with
    `use_extra_bufts = False` in the model parameters.
  * llama-server is built from the llama.cpp sources bundled with llama-cpp-python: first
    natively (GGML_NATIVE=ON, what a plain build does), then portably (GGML_NATIVE=OFF with
    the AVX / AVX2 / AVX-512 options this CPU has switched on and AMX off).
"""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile

CACHE = os.environ.get("GEMMAD_CACHE") or os.path.expanduser("~/.cache/gemmad")


class BaselineFailed(RuntimeError):
    """No configuration of a baseline could run; the message says what each one did."""


def describe_exit(rc):
    """'exit status 1', 'SIGSEGV', ... for a subprocess return code."""
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# ---- llama-cpp-python -----------------------------------------------------------------------

# (name, description) in order of preference.
LLAMA_PY_CONFIGS = [
    ("default", "llama-cpp-python defaults (extra CPU buffer types: repacked/AMX weights)"),
    ("no_extra_bufts", "use_extra_bufts = False (plain CPU weight buffers, no repacking/AMX)"),
]


def apply_llama_py_config(name):
    """In the process that will load the model, before it does."""
    if name == "default":
        return
    if name != "no_extra_bufts":
        raise ValueError(name)
    import llama_cpp.llama_cpp as C  # Llama() and the low-level API both call this
    orig = C.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    C.llama_model_default_params = params


def _load(script):
    spec = importlib.util.spec_from_file_location("bench_target", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def worker_main(argv):
    """Child side. argv: config, script, name, JSON kwargs. A class: construct it, answer
    {"ready": ...}, then call one method per stdin line and answer {"result": ...}. A function:
    call it and answer {"result": ...}. Answers go to the original stdout; fd 1 is pointed at
    stderr so nothing llama.cpp prints can corrupt them."""
    config, script, name, kwargs = argv[0], argv[1], argv[2], json.loads(argv[3])
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    apply_llama_py_config(config)
    target = getattr(_load(script), name)

    def answer(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()
    if not isinstance(target, type):
        answer({"result": target(**kwargs)})
        return 0
    obj = target(**kwargs)
    answer({"ready": getattr(obj, "info", {})})
    for line in sys.stdin:
        method = line.strip()
        if method:
            answer({"result": getattr(obj, method)()})
    return 0


class _Child:
    def __init__(self, config, script, name, kwargs):
        self.err = tempfile.TemporaryFile(mode="w+")  # its stderr, for the failure message
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "worker", config, script, name,
             json.dumps(kwargs)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.err, text=True)

    def read(self, what):
        line = self.proc.stdout.readline()
        if not line:
            rc = self.proc.wait()
            self.err.seek(0)
            last = [x for x in self.err.read()[-2000:].splitlines() if x.strip()]
            raise BaselineFailed(f"{describe_exit(rc)} during {what}" +
                                 (f" ({last[-1].strip()[:200]})" if last and rc > 0 else ""))
        return json.loads(line)

    def call(self, method):
        try:
            self.proc.stdin.write(method + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        return self.read(method)["result"]

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(30)
            except (subprocess.TimeoutExpired, OSError):
                self.proc.kill()
                self.proc.wait()
        self.err.close()


class LlamaPy:
    """A llama-cpp-python baseline object (class `name` of `script`, built with kwargs) in a
    child process, in the first configuration where construction and one call of `warm`
    succeed. .config / .config_desc say which ran, .tried what the others did."""

    def __init__(self, script, name, kwargs, warm="run", log=None):
        self.tried, self.child = [], None
        for config, desc in LLAMA_PY_CONFIGS:
            child = _Child(config, script, name, kwargs)
            try:
                self.info = child.read("model load")["ready"]
                child.call(warm)
            except BaselineFailed as e:
                child.close()
                self.tried.append(f"{config}: {e}")
                if log:
                    log(f"baseline: llama-cpp-python with {desc} failed ({e}); trying the next")
                continue
            self.child, self.config, self.config_desc = child, config, desc
            return
        raise BaselineFailed("llama-cpp-python: every configuration failed: " +
                             "; ".join(self.tried))

    def call(self, method):
        try:
            return self.child.call(method)
        except BaselineFailed as e:
            raise BaselineFailed(f"llama-cpp-python ({self.config}) {e}") from None

    def describe(self):
        s = f"llama-cpp-python {self.info.get('version', '?')}, {self.config_desc}"
        return s + (f" [fallback: {'; '.join(self.tried)}]" if self.tried else "")

    def close(self):
        if self.child:
            self.child.close()


def llama_py_function(script, name, kwargs, log=None):
    """Runs function `name` of `script` in a child, in the first configuration that finishes.
    Returns (result, description of the configuration that ran)."""
    tried = []
    for config, desc in LLAMA_PY_CONFIGS:
        child = _Child(config, script, name, kwargs)
        try:
            res = child.read(name)["result"]
        except BaselineFailed as e:
            tried.append(f"{config}: {e}")
            if log:
                log(f"baseline: llama-cpp-python with {desc} failed ({e}); trying the next")
            continue
        finally:
            child.close()
        return res, desc + (f" [fallback: {'; '.join(tried)}]" if tried else "")
    raise BaselineFailed("llama-cpp-python: every configuration failed: " + "; ".join(tried))


# ---- llama-server -------------------------------------------------------------------------

def llama_source():
    import glob
    hits = sorted(glob.glob(os.path.join(CACHE, "src", "llama_cpp_python-*", "vendor",
                                         "llama.cpp")))
    return hits[-1] if hits else None


def portable_isa_options(flags):
    """GGML options for a GGML_NATIVE=OFF build: each x86 extension on when this CPU has it;
    AMX off (its tile code is what fails on the guests this fallback is for)."""
    table = [("GGML_AVX", "avx"), ("GGML_AVX2", "avx2"), ("GGML_FMA", "fma"),
             ("GGML_F16C", "f16c"), ("GGML_BMI2", "bmi2"), ("GGML_AVX_VNNI", "avx_vnni"),
             ("GGML_AVX512", "avx512f"), ("GGML_AVX512_VBMI", "avx512vbmi"),
             ("GGML_AVX512_VNNI", "avx512_vnni"), ("GGML_AVX512_BF16", "avx512_bf16")]
    opts = [f"-D{o}={'ON' if f in flags else 'OFF'}" for o, f in table]
    return opts + ["-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]


def llama_server_variants():
    """(name, build folder, cmake options, description) in order of preference."""
    port = portable_isa_options(cpu_flags())
    on = [o[2:-3] for o in port if o.endswith("=ON")]
    return [("native", os.path.join(CACHE, "llama-server-build"), ["-DGGML_NATIVE=ON"],
             "native build (GGML_NATIVE=ON)"),
            ("portable", os.path.join(CACHE, "llama-server-build-portable"),
             ["-DGGML_NATIVE=OFF"] + port,
             "portable build (GGML_NATIVE=OFF, " + ", ".join(on) + ", AMX off)")]


def build_llama_server(build_dir, options, jobs=2, log=None):
    """Builds llama-server into build_dir unless it is there; returns its path. Raises
    BaselineFailed when the sources are missing or the build fails."""
    exe = os.path.join(build_dir, "bin", "llama-server")
    if os.path.exists(exe):
        return exe
    src = llama_source()
    if not src:
        raise BaselineFailed("llama.cpp sources not found under the cache (run "
                             "deploy/setup-bench.sh)")
    if log:
        log(f"baseline: building llama-server in {build_dir} ({' '.join(options)}); a few "
            "minutes")
    os.makedirs(build_dir, exist_ok=True)
    for cmd in (["cmake", "-S", src, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                 "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                 "-DLLAMA_BUILD_EXAMPLES=OFF"] + options,
                ["cmake", "--build", build_dir, "--target", "llama-server", f"-j{jobs}"]):
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise BaselineFailed(f"llama-server build failed: {r.stderr[-800:]}")
    if not os.path.exists(exe):
        raise BaselineFailed("llama-server build produced no binary")
    return exe


if __name__ == "__main__":
    if len(sys.argv) >= 6 and sys.argv[1] == "worker":
        sys.exit(worker_main(sys.argv[2:]))
    print(__doc__)
    print("CPU flags of note:", " ".join(sorted(f for f in cpu_flags()
                                                if f.startswith(("avx", "amx")))))
    for v in llama_server_variants():
        print(f"llama-server {v[0]}: {v[3]}")
