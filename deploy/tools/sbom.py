"""Sanity of the CycloneDX SBOM `cargo cyclonedx` wrote for weir (deploy/check): the format, the
root component, and every crate of the binary's dependency tree (`cargo metadata`, normal
dependencies of weir-tokio) present with a version and a purl.

  sbom.py weir.cdx.json
"""
import json
import subprocess
import sys


def host():
    out = subprocess.check_output(["rustc", "-vV"], text=True)
    return next(l.split(": ", 1)[1] for l in out.splitlines() if l.startswith("host: "))


def tree():
    """weir-tokio's normal and build dependencies on this host's platform (what the binary built
    here contains, as the SBOM describes it)."""
    meta = json.loads(subprocess.check_output(
        ["cargo", "metadata", "--format-version", "1", "--offline", "--filter-platform", host(),
         "--manifest-path", "adapter-tokio/Cargo.toml"]))
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    pkgs = {p["id"]: p for p in meta["packages"]}
    root = next(i for i, p in pkgs.items() if p["name"] == "weir-tokio")
    seen, todo = set(), [root]
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        for dep in nodes[i]["deps"]:
            if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]):
                todo.append(dep["pkg"])
    return {(pkgs[i]["name"], pkgs[i]["version"]) for i in seen}


def main(path):
    bom = json.load(open(path))
    problems = []
    if bom.get("bomFormat") != "CycloneDX":
        problems.append("bomFormat is not CycloneDX")
    root = bom.get("metadata", {}).get("component", {})
    if root.get("name") != "weir-tokio":
        problems.append(f"root component {root.get('name')!r}, want weir-tokio")
    comps = {(c.get("name"), c.get("version")): c for c in bom.get("components", [])}
    comps[(root.get("name"), root.get("version"))] = root
    for c in bom.get("components", []):
        if not c.get("purl", "").startswith("pkg:cargo/"):
            problems.append(f"{c.get('name')}: no cargo purl")
    want = tree()
    missing = sorted(want - set(comps))
    if missing:
        problems.append(f"{len(missing)} crates of the tree are missing, e.g. {missing[:5]}")
    for p in problems:
        print(f"sbom: {p}", file=sys.stderr)
    print(f"sbom: {len(comps)} components, {len(want)} crates in weir's tree")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
