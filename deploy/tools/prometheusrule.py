"""The PrometheusRule of kubernetes/components/prometheusrule, generated from
observability/weir.rules.yml so the two cannot drift.

  prometheusrule.py --check   exit 1 when the committed file differs from the generated one
  prometheusrule.py --write   regenerate it
"""
import pathlib
import sys

import yaml

DEPLOY = pathlib.Path(__file__).resolve().parent.parent
RULES = DEPLOY / "observability" / "weir.rules.yml"
TARGET = DEPLOY / "kubernetes" / "components" / "prometheusrule" / "prometheusrule.yaml"
HEADER = (
    "# Generated from deploy/observability/weir.rules.yml: edit that file, then regenerate with\n"
    "# `python3 deploy/tools/prometheusrule.py --write`. deploy/check fails when the two differ.\n"
)


def literal(dumper, value):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def render() -> str:
    yaml.SafeDumper.add_representer(str, literal)
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "weir",
            "labels": {"app.kubernetes.io/name": "weir", "role": "alert-rules"},
        },
        "spec": yaml.safe_load(RULES.read_text()),
    }
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=1000)


def main() -> int:
    want = render()
    if sys.argv[1:] == ["--write"]:
        TARGET.write_text(want)
        return 0
    if sys.argv[1:] != ["--check"]:
        print("usage: prometheusrule.py --check | --write", file=sys.stderr)
        return 2
    if TARGET.read_text() != want:
        print(f"{TARGET} differs from {RULES}: run prometheusrule.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
