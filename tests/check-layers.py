#!/usr/bin/env python3
"""Layering check: every project #include points down the intended arrows, and no two
modules include each other (directly or through a longer circle).

Layers (a file may include headers of its own layer and of the layers listed for it):

    tools/, tests/  -> anything below
    server/         -> scheduler/, engine/ (public headers), config/, base/
    scheduler/      -> engine/ (public headers), config/, base/
    engine/         -> engine/kernels/, base/   (never engine/cuda/: the CUDA backend
                       registers as be_cuda, declared in engine/backend.h)
    engine/cuda/    -> engine/backend.h, engine/kernels/quant.h, base/   (a leaf)
    engine/kernels/ -> base/                                           (a leaf)
    config/         -> base/                                           (a leaf)
    base/           -> nothing                                         (a leaf)

A module is a source file's path without its extension, so `server/routes.c` and
`server/routes.h` are one module; a private header `x_int.h` belongs to module `x`. A cycle
between modules (a.c includes b.h and b.c includes a.h, or a longer ring) fails the check.

With --objects DIR (the build's object tree, build/obj), the same two rules are checked on
what the objects really use: an undefined symbol of one object resolved by another is an
edge. That finds circles an include graph cannot see, such as two files calling each other
through one shared internal header. For that graph a file `x_y.c` is part of module `x` when
it is an instruction-set variant (`_ref`, `_avx2`, `_avx512`, `_x86`) or when `x` has a
private header (`x_int.h`, `x_impl.h`) in the same folder: one module spread over files.

Usage: tests/check-layers.py [--objects DIR] [ROOT]   (exit 0 clean, 1 on any violation)
"""
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = (".c", ".h", ".cu", ".cuh")
SKIP_DIRS = {".git", "build", "models", "node_modules", "__pycache__"}

# Where files may include from, by layer. A layer is the longest matching directory prefix.
ALLOWED = {
    "base/": ["base/"],
    "config/": ["config/", "base/"],
    "engine/kernels/": ["engine/kernels/", "base/"],
    "engine/cuda/": ["engine/cuda/", "engine/backend.h", "engine/kernels/quant.h", "base/"],
    "engine/": ["engine/", "base/"],
    "scheduler/": ["scheduler/", "engine/", "config/", "base/"],
    "server/": ["server/", "scheduler/", "engine/", "config/", "base/"],
    "tools/": ["tools/", "server/", "scheduler/", "engine/", "config/", "base/"],
    "tests/": [""],
}
# Nothing outside tests/ and tools/ may include engine-internal headers of another layer.


def layer_of(path):
    best = None
    for layer in ALLOWED:
        if path.startswith(layer) and (best is None or len(layer) > len(best)):
            best = layer
    return best


def module_of(path):
    stem = os.path.splitext(path)[0]
    if stem.endswith("_int"):
        stem = stem[: -len("_int")]
    return stem


def allowed(src, target):
    layer = layer_of(src)
    if layer is None:
        return True  # files outside the known layers (none today) are not checked
    if layer == "engine/" and target.startswith("engine/cuda/"):
        return False  # the backend table (engine/backend.h) is the only way in
    for prefix in ALLOWED[layer]:
        if target == prefix or target.startswith(prefix):
            # engine/ (not engine/cuda or engine/kernels) as a prefix must not admit
            # engine/cuda/ headers from scheduler/server either.
            if prefix == "engine/" and target.startswith("engine/cuda/") and layer not in (
                "tests/", "tools/"):
                return False
            return True
    return False


def scan(root):
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
        for n in names:
            if n.endswith(SOURCES):
                p = os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/")
                files.append(p)
    return sorted(files)


def find_cycles(edges):
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


ISA_SUFFIXES = ("_ref", "_avx2", "_avx512", "_x86")


def symbol_module(path, root):
    """Module of an object for the symbol graph (see the docstring)."""
    stem = os.path.splitext(path)[0]
    d, base = os.path.split(stem)
    parts = base.split("_")
    for i in range(len(parts) - 1, 0, -1):
        head = "_".join(parts[:i])
        rest = "_" + "_".join(parts[i:])
        private = any(os.path.exists(os.path.join(root, d, head + suf))
                      for suf in ("_int.h", "_impl.h"))
        if (rest.endswith(ISA_SUFFIXES) or private) and (
                os.path.exists(os.path.join(root, d, head + ".c"))
                or os.path.exists(os.path.join(root, d, head + ".h"))):
            return (d + "/" if d else "") + head
    return stem


def object_edges(objdir, root):
    defined, undefined = {}, {}
    for d, _, names in os.walk(objdir):
        for n in names:
            if not n.endswith(".o"):
                continue
            o = os.path.join(d, n)
            rel = os.path.relpath(o, objdir).replace(os.sep, "/")
            src = rel[:-2]
            if src.endswith(".cu"):
                src = src[:-3] + ".cu"
            else:
                src += ".c"
            if not os.path.exists(os.path.join(root, src)):
                continue  # a stale object of a file that no longer exists
            out = subprocess.run(["nm", "-P", o], capture_output=True, text=True).stdout
            dset, uset = set(), set()
            for line in out.splitlines():
                f = line.split()
                if len(f) >= 2 and f[1] in "TDBRVW":
                    dset.add(f[0])
                elif len(f) >= 2 and f[1] == "U":
                    uset.add(f[0])
            defined[src], undefined[src] = dset, uset
    owner = {}
    for src, syms in defined.items():
        # tests and tools are never linked into the library; a test double (test_cuda_host
        # defines the CUDA runtime calls) owns nothing the library uses
        if src.startswith(("tests/", "tools/")):
            continue
        for sym in syms:
            owner.setdefault(sym, src)
    problems, edges = [], {}
    for src, syms in sorted(undefined.items()):
        if src.startswith(("tests/", "tools/")):
            continue
        for sym in sorted(syms):
            dst = owner.get(sym)
            if dst is None or dst == src:
                continue
            # A symbol is used through its module's header: judge the edge by that header.
            dst_h = os.path.splitext(dst)[0] + ".h"
            if not allowed(src, dst_h) and not (layer_of(src) == "engine/" and
                                                dst.startswith("engine/cuda/")):
                problems.append(f"{src}: uses {sym} from {dst} against the layering")
            a, b = symbol_module(src, root), symbol_module(dst, root)
            if a != b:
                edges.setdefault(a, set()).add(b)
    return problems, edges


def main():
    args = sys.argv[1:]
    objdir = None
    if args[:1] == ["--objects"]:
        objdir, args = args[1], args[2:]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    files = scan(root)
    known = set(files)
    problems = []
    edges = {}
    for src in files:
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in INCLUDE.finditer(text):
            target = m.group(1)
            if target not in known:
                continue  # system or generated header
            line = text.count("\n", 0, m.start()) + 1
            if not allowed(src, target):
                problems.append(f"{src}:{line}: includes {target} against the layering "
                                f"({layer_of(src)} may include {', '.join(ALLOWED[layer_of(src)])})")
            if src.startswith(("tests/", "tools/")):
                continue  # test and tool programs sit above everything; no cycle through them
            a, b = module_of(src), module_of(target)
            if a != b:
                edges.setdefault(a, set()).add(b)
    for comp in find_cycles(edges):
        problems.append("include cycle between modules: " + " <-> ".join(comp))
    n_sym = 0
    if objdir is not None:
        sym_problems, sym_edges = object_edges(objdir, root)
        problems += sym_problems
        for comp in find_cycles(sym_edges):
            problems.append("call cycle between modules (symbols): " + " <-> ".join(comp))
        n_sym = sum(len(v) for v in sym_edges.values())
    for p in problems:
        print("layers: " + p)
    print(f"layers: {len(files)} files, {sum(len(v) for v in edges.values())} module edges, "
          f"{n_sym} symbol edges, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
