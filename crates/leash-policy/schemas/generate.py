#!/usr/bin/env python3
"""Writes the structural schemas leash checks policies against.

Reads the CustomResourceDefinitions of Kyverno's policy kinds from the
github.com/kyverno/kyverno Go module (`config/crds`, fetched through the
module proxy) and writes `kyverno.json` beside this script: for each kind
and served version, the index of the `spec` of its openAPIV3Schema in
`schemas` (identical schemas once), with what strict
decoding and schema validation need (properties, items, enum, type,
required, additionalProperties, x-kubernetes-preserve-unknown-fields,
x-kubernetes-int-or-string, nullable) and without descriptions, defaults
and status. The data is Kyverno's API (Apache-2.0), not its code.

    crates/leash-policy/schemas/generate.py [VERSION]   # default v1.19.1
"""

import json
import os
import subprocess
import sys

import yaml

VERSION = sys.argv[1] if len(sys.argv) > 1 else "v1.19.1"
KEEP = {
    "type",
    "properties",
    "items",
    "enum",
    "required",
    "additionalProperties",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "nullable",
    "anyOf",
    "oneOf",
    "allOf",
}
FILES = [
    "kyverno/kyverno.io_clusterpolicies.yaml",
    "kyverno/kyverno.io_policies.yaml",
    "kyverno/kyverno.io_policyexceptions.yaml",
    "kyverno/kyverno.io_cleanuppolicies.yaml",
    "kyverno/kyverno.io_clustercleanuppolicies.yaml",
    "policies.kyverno.io/policies.kyverno.io_validatingpolicies.yaml",
    "policies.kyverno.io/policies.kyverno.io_namespacedvalidatingpolicies.yaml",
    "policies.kyverno.io/policies.kyverno.io_mutatingpolicies.yaml",
    "policies.kyverno.io/policies.kyverno.io_namespacedmutatingpolicies.yaml",
    "policies.kyverno.io/policies.kyverno.io_generatingpolicies.yaml",
    "policies.kyverno.io/policies.kyverno.io_namespacedgeneratingpolicies.yaml",
    "policies.kyverno.io/policies.kyverno.io_deletingpolicies.yaml",
    "policies.kyverno.io/policies.kyverno.io_namespaceddeletingpolicies.yaml",
    "policies.kyverno.io/policies.kyverno.io_imagevalidatingpolicies.yaml",
    "policies.kyverno.io/policies.kyverno.io_namespacedimagevalidatingpolicies.yaml",
    "policies.kyverno.io/policies.kyverno.io_policyexceptions.yaml",
]


def prune(schema):
    if isinstance(schema, list):
        return [prune(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key not in KEEP:
            continue
        if key == "properties":
            out[key] = {name: prune(sub) for name, sub in sorted(value.items())}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = prune(value)
        elif key in ("anyOf", "oneOf", "allOf"):
            out[key] = [prune(s) for s in value]
        else:
            out[key] = value
    return out


def main():
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"github.com/kyverno/kyverno@{VERSION}"],
        check=True,
        capture_output=True,
        text=True,
        cwd="/tmp",
    )
    root = os.path.join(json.loads(out.stdout)["Dir"], "config", "crds")
    kinds = {}
    schemas = []
    for name in FILES:
        with open(os.path.join(root, name)) as f:
            crd = yaml.safe_load(f)
        spec = crd["spec"]
        group = spec["group"]
        kind = spec["names"]["kind"]
        for version in spec["versions"]:
            if not version.get("served", False):
                continue
            schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
            key = f"{group}/{version['name']}/{kind}"
            pruned = prune(schema)
            if pruned not in schemas:
                schemas.append(pruned)
            kinds[key] = schemas.index(pruned)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "kyverno.json"), "w") as f:
        json.dump(
            {
                "source": f"github.com/kyverno/kyverno@{VERSION} config/crds",
                "kinds": kinds,
                "schemas": schemas,
            },
            f,
            separators=(",", ":"),
            sort_keys=True,
        )
        f.write("\n")


main()
