"""Build llama.cpp from a pristine source tree into a cache keyed by what determines the binaries.

Stdlib only (Python >= 3.8): the same code builds on the controller (``harness.engines.llamacpp.build``)
and on a board (``python3 -m runner engine build SPEC``), so a build on a board is keyed exactly like a
local one: sha256 of the source identity, the cmake flags, the patch hashes and the compiler's
``--version`` lines.

Layout under ``cache_dir``::

    <key>/src/        private copy of the source, patches applied here
    <key>/build/      cmake build dir; binaries in build/bin/
    <key>/build.log   everything cmake, the compiler and git apply printed
    <key>/build.json  the record of the completed build
    <key>/DONE        written last; a key dir without it is an interrupted or failed build
"""

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from contextlib import contextmanager
from datetime import datetime, timezone

from runner.util import sha256_file

DEFAULT_TARGETS = ("llama-bench", "llama-server")


class EngineBuildError(Exception):
    """One line for the user, naming what failed and the log to read."""


def _first_line(cmd):
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (out.strip().splitlines() or ["unknown"])[0]


def compiler_identity():
    """First line of `cc --version` and `c++ --version` (or $CC/$CXX): a compiler upgrade means a rebuild."""
    cc = os.environ.get("CC", "cc")
    cxx = os.environ.get("CXX", "c++")
    return "%s | %s" % (_first_line([cc, "--version"]), _first_line([cxx, "--version"]))


def cache_key(identity, cmake_flags, patch_shas, compiler):
    blob = json.dumps({"source": identity, "cmake": list(cmake_flags), "patches": list(patch_shas),
                       "compiler": compiler}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


@contextmanager
def locked(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def skip_dir(path):
    # .git holds no build input; a cmake build dir inside the tree would make builds depend on old builds.
    return os.path.basename(path) == ".git" or os.path.exists(os.path.join(path, "CMakeCache.txt"))


def copy_tree(src, dst):
    """Copy a source tree without VCS metadata or in-tree build dirs (patches must not reach the original)."""
    def ignore(directory, names):
        return {n for n in names if n == ".git" or skip_dir(os.path.join(directory, n))}
    shutil.copytree(src, dst, symlinks=True, ignore=ignore)


def build_env(src):
    # The private copy has no .git; stop git (used by llama.cpp's build-info.cmake and by `git apply`) from
    # discovering an unrelated repository that happens to enclose the cache directory.
    return dict(os.environ, GIT_CEILING_DIRECTORIES=os.path.dirname(src), LC_ALL="C")


def compiler_cache(key_dir):
    """(cmake arguments, environment, record) that build through ccache when it is installed (and
    ``HARNESS_CCACHE`` is not ``off``): its cache in ``<build cache>/ccache`` and its base directory the build's
    own directory, so the absolute paths of two private copies of one tree (``<key>/src``, ``<key>/build``) hash
    alike and a tree that differs by one patch recompiles only what the patch touched. Never part of the cache key:
    it changes how fast a build is, not what it builds."""
    ccache = shutil.which("ccache")
    if ccache is None or os.environ.get("HARNESS_CCACHE", "").lower() in ("0", "off", "no"):
        return [], {}, None
    directory = os.path.join(os.path.dirname(os.path.abspath(key_dir)), "ccache")
    env = {"CCACHE_DIR": directory, "CCACHE_BASEDIR": os.path.abspath(key_dir), "CCACHE_NOHASHDIR": "1"}
    args = ["-DCMAKE_C_COMPILER_LAUNCHER=%s" % ccache, "-DCMAKE_CXX_COMPILER_LAUNCHER=%s" % ccache]
    return args, env, {"path": ccache, "version": _first_line([ccache, "--version"]), "dir": directory}


def _run_logged(cmd, cwd, env, log):
    with open(log, "a") as out:
        out.write("\n$ %s\n" % " ".join(cmd))
        out.flush()
        return subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode


def apply_patches(patches, src, log):
    """``git apply`` each patch (checked first, so a bad one changes nothing); ``patch -p1`` without git."""
    env = build_env(src)
    use_git = shutil.which("git") is not None
    for patch in patches:
        if use_git:
            steps = [["git", "apply", "--check", "--verbose", "--whitespace=nowarn", patch],
                     ["git", "apply", "--verbose", "--whitespace=nowarn", patch]]
        else:
            steps = [["patch", "-p1", "--forward", "--dry-run", "-i", patch],
                     ["patch", "-p1", "--forward", "-i", patch]]
        for cmd in steps:
            if _run_logged(cmd, src, env, log) != 0:
                with open(log, errors="replace") as handle:
                    errors = [ln for ln in handle.read().splitlines() if ln.startswith("error:")]
                why = errors[-1][len("error: "):] if errors else "%s failed" % cmd[0]
                raise EngineBuildError("patch %s does not apply: %s; log: %s" % (patch, why, log))


def _unused_vars(log):
    """cmake's 'Manually-specified variables were not used' list: a typo, or a flag this version lacks."""
    with open(log, errors="replace") as handle:
        text = handle.read()
    found = re.search(r"Manually-specified variables were not used by the project:\n\n((?:\s+\S+\n)+)", text)
    return found.group(1).split() if found else []


def _version(binary):
    try:
        proc = subprocess.run([binary, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "unavailable: %s" % exc
    return proc.stdout.strip()


def find_binary(bld, target):
    """Where cmake put ``target``: ``bin/`` (llama.cpp's output directory), else the directory of its CMakeLists
    (an engine that embeds llama.cpp as a subproject, e.g. BigMoeOnEdge's cli/bmoe-cli)."""
    binary = os.path.join(bld, "bin", target)
    if os.path.isfile(binary):
        return binary
    for dirpath, dirnames, filenames in os.walk(bld):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(("CMakeFiles", "third_party")))
        if target in filenames and os.access(os.path.join(dirpath, target), os.X_OK):
            return os.path.join(dirpath, target)
    return binary


def load_cached(key_dir, targets):
    """The record of a complete build whose binaries are all there and unchanged, else None."""
    if not os.path.isfile(os.path.join(key_dir, "DONE")):
        return None
    try:
        with open(os.path.join(key_dir, "build.json")) as handle:
            info = json.load(handle)
    except (OSError, ValueError):
        return None
    for target in targets:
        binary = info.get("binaries", {}).get(target)
        if binary is None or not os.path.isfile(binary) or sha256_file(binary) != info["binary_sha256"].get(target):
            return None
    return info


def _previous_targets(key_dir):
    try:
        with open(os.path.join(key_dir, "build.json")) as handle:
            return list(json.load(handle)["binaries"]) if os.path.isfile(os.path.join(key_dir, "DONE")) else None
    except (OSError, ValueError, KeyError):
        return None


def build_cached(tree, identity, commit, flags, patches, cache_dir, targets=DEFAULT_TARGETS, jobs=None,
                 say=print):
    """Build ``targets`` from the pristine ``tree`` (or take them from the cache); return the build record.

    ``patches`` is a list of (path, sha256). Concurrent callers with the same inputs wait for one build.
    """
    compiler = compiler_identity()
    key = cache_key(identity, flags, [sha for _path, sha in patches], compiler)
    key_dir = os.path.join(cache_dir, key)
    hit = load_cached(key_dir, targets)
    if hit:
        return dict(hit, cached=True)
    with locked(os.path.join(cache_dir, key + ".lock")):
        hit = load_cached(key_dir, targets)  # another process may have finished it while we waited
        if hit:
            return dict(hit, cached=True)
        info = _build(tree, identity, commit, list(flags), list(patches), compiler, key, key_dir, list(targets),
                      jobs or os.cpu_count() or 1, say)
        return dict(info, cached=False)


def _build(tree, identity, commit, flags, patches, compiler, key, key_dir, targets, jobs, say):
    missing = [tool for tool in ("cmake", os.environ.get("CC", "cc"), os.environ.get("CXX", "c++"))
               if shutil.which(tool) is None]
    if missing:
        raise EngineBuildError("cannot build llama.cpp here: %s not installed (apt-get install cmake gcc g++)"
                               % ", ".join(missing))
    src, bld, logf = (os.path.join(key_dir, name) for name in ("src", "build", "build.log"))
    configure = list(flags)
    if commit:  # the copy has no .git, so tell build-info what `git rev-parse --short` would have
        configure.append("-DLLAMA_BUILD_COMMIT=%s" % commit[:7])
    launcher, cache_env, ccache = compiler_cache(key_dir)
    env = dict(build_env(src), **cache_env)
    started = time.monotonic()
    previous = _previous_targets(key_dir)
    if previous is not None and os.path.isfile(os.path.join(bld, "CMakeCache.txt")):
        # A complete build of the same inputs that lacks a target: add it incrementally, keep the others.
        targets = list(dict.fromkeys(previous + targets))
        os.unlink(os.path.join(key_dir, "DONE"))
    else:
        # Anything here without DONE is a failed or interrupted attempt: start clean rather than trust it.
        shutil.rmtree(key_dir, ignore_errors=True)
        os.makedirs(key_dir)
        with open(logf, "w") as out:
            out.write("# harness llama.cpp build %s\n# source %s\n" % (key, json.dumps(identity)))
        say("llama.cpp build %s: copying source to %s" % (key[:12], src))
        copy_tree(tree, src)
        apply_patches([path for path, _sha in patches], src, logf)
        say("llama.cpp build %s: cmake configure (log: %s)" % (key[:12], logf))
        if _run_logged(["cmake", "-S", src, "-B", bld] + configure + launcher, key_dir, env, logf):
            raise EngineBuildError("llama.cpp cmake configure failed (flags: %s); log: %s" % (" ".join(flags), logf))
    say("llama.cpp build %s: compiling %s with %d jobs" % (key[:12], ", ".join(targets), jobs))
    cmd = ["cmake", "--build", bld, "--config", "Release", "-j", str(jobs), "--target"] + targets
    if _run_logged(cmd, key_dir, env, logf):
        raise EngineBuildError("llama.cpp build of %s failed; log: %s" % (", ".join(targets), logf))
    binaries = {}
    for target in targets:
        binary = find_binary(bld, target)
        if not os.path.isfile(binary):
            raise EngineBuildError("llama.cpp build finished but %s is missing; log: %s" % (binary, logf))
        binaries[target] = binary
    info = {
        "key": key, "dir": key_dir, "source": identity, "source_dir": tree, "commit": commit,
        "cmake_flags": configure, "patches": [{"path": path, "sha256": sha} for path, sha in patches],
        "compiler": compiler, "compiler_cache": ccache, "binaries": binaries,
        "binary_sha256": {t: sha256_file(b) for t, b in binaries.items()},
        "versions": {t: _version(b) for t, b in binaries.items()},
        "build_seconds": round(time.monotonic() - started, 1),
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "log": logf, "unused_cmake_vars": _unused_vars(logf),
    }
    if info["unused_cmake_vars"]:
        say("llama.cpp build %s: cmake ignored %s (typo, or a flag this version lacks?)"
            % (key[:12], ", ".join(info["unused_cmake_vars"])))
    with open(os.path.join(key_dir, "build.json"), "w") as out:
        out.write(json.dumps(info, indent=1) + "\n")
    with open(os.path.join(key_dir, "DONE"), "w") as out:
        out.write(info["built_at"] + "\n")
    say("llama.cpp build %s: done in %.0f s" % (key[:12], info["build_seconds"]))
    return info


# --------------------------------------------------------------------------- sources on a board

def unpack_source(archive, dest):
    """Unpack a source tree the controller pushed (once; ``dest`` appears complete or not at all)."""
    if os.path.isdir(dest):
        return dest
    tmp = dest + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(archive) as tar:
        # The "data" filter refuses absolute paths and links leaving the tree (Python >= 3.8.17 / 3.11.4).
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(tmp, **kwargs)
    os.replace(tmp, dest)
    return dest


def _git(dest, args, log):
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    proc = subprocess.run(["git", "-C", dest] + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    with open(log, "a") as out:
        out.write("$ git %s\n%s%s[exit %d]\n" % (" ".join(args), proc.stdout, proc.stderr, proc.returncode))
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        raise EngineBuildError("git %s failed (exit %d): %s; log: %s" % (args[0], proc.returncode, last.strip(), log))
    return proc.stdout


def git_checkout(url, commit, cache):
    """A pristine checkout of ``url`` at ``commit`` under ``cache`` (fetched once); returns (dir, full commit)."""
    if shutil.which("git") is None:
        raise EngineBuildError("git is not installed (needed for a git engine source; or push a checkout "
                               "with source: {path: ...})")
    slug = hashlib.sha256(url.encode()).hexdigest()[:16]
    log = os.path.join(cache, "fetch.log")
    dest = os.path.join(cache, "git", "%s-%s" % (slug, commit[:12]))
    done = os.path.join(dest, ".harness-checkout")
    if not os.path.isfile(done):
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        _git(dest, ["init", "-q"], log)
        _git(dest, ["remote", "add", "origin", url], log)
        try:  # a full SHA can be fetched shallowly from most servers; short ones and old servers need history
            _git(dest, ["fetch", "-q", "--depth", "1", "origin", commit], log)
            _git(dest, ["checkout", "-q", "--detach", "FETCH_HEAD"], log)
        except EngineBuildError:
            _git(dest, ["fetch", "-q", "origin"], log)
            _git(dest, ["checkout", "-q", "--detach", commit], log)
        with open(done, "w") as out:
            out.write(url + "\n")
    full = _git(dest, ["rev-parse", "HEAD"], log).strip()
    if not full.startswith(commit.lower()):
        raise EngineBuildError("git checkout of %s is at %s, not %s" % (url, full, commit))
    return dest, full


def llama_root(directory):
    """The llama.cpp tree inside ``directory``: itself, or the copy vendored by llama-cpp-python."""
    for cand in (os.path.join(directory, "vendor", "llama.cpp"), directory):
        if os.path.isfile(os.path.join(cand, "CMakeLists.txt")) and os.path.isdir(os.path.join(cand, "ggml")):
            return cand
    raise EngineBuildError("no llama.cpp source tree (CMakeLists.txt + ggml/) in %s" % directory)


def resolve_source(spec):
    """(tree, identity, commit) for a board-side build spec's ``source``: pushed archive or git."""
    source, cache = spec["source"], spec["cache_dir"]
    sources = os.path.join(cache, "sources")
    os.makedirs(sources, exist_ok=True)
    if source["kind"] == "git":
        with locked(os.path.join(sources, ".lock")):
            checkout, full = git_checkout(source["url"], source["commit"], sources)
        return llama_root(checkout), {"kind": "git", "url": source["url"], "commit": full}, full
    with locked(os.path.join(sources, ".lock")):
        tree = unpack_source(source["archive"], os.path.join(sources, "pushed", source["identity_hash"]))
    return tree, source["identity"], source.get("commit")


def _git_identity(source):
    commit = source.get("commit") or ""
    if source.get("kind") == "git" and re.fullmatch(r"[0-9a-f]{40}", commit):
        return {"kind": "git", "url": source["url"], "commit": commit}
    return None


def run_spec(spec_path, check_only=False):
    """``runner engine build|check SPEC``: print the build record as JSON (``null`` on a cache miss when checking)."""
    with open(spec_path) as handle:
        spec = json.load(handle)
    targets = spec.get("targets") or list(DEFAULT_TARGETS)
    patches = [(p["path"], p["sha256"]) for p in spec.get("patches", [])]
    if check_only:
        identity = spec["source"].get("identity") or _git_identity(spec["source"])
        if identity is None:  # a short git commit: the full one is known only after the checkout
            return None
        key = cache_key(identity, spec["flags"], [sha for _path, sha in patches], compiler_identity())
        hit = load_cached(os.path.join(spec["cache_dir"], key), targets)
        return dict(hit, cached=True) if hit else None
    tree, identity, commit = resolve_source(spec)
    return build_cached(tree, identity, commit, spec["flags"], patches, spec["cache_dir"], targets,
                        spec.get("jobs"), say=lambda line: print(line, flush=True))
