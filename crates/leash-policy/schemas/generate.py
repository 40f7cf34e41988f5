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

    crates/leash-policy/schemas/generate.py [VERSION [KUBERNETES]]   # default v1.19.1 v1.37.2
"""

import json
import os
import subprocess
import sys

import yaml

VERSION = sys.argv[1] if len(sys.argv) > 1 else "v1.19.1"
# Kubernetes' own admission policy kinds (Kyverno's CLI evaluates them):
# from the OpenAPI v3 spec of k8s.io/kubernetes at this version.
KUBERNETES = sys.argv[2] if len(sys.argv) > 2 else "v1.37.2"
ADMISSION_KINDS = [
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
]
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


def module_dir(module):
    out = subprocess.run(
        ["go", "mod", "download", "-json", module],
        check=True,
        capture_output=True,
        text=True,
        cwd="/tmp",
    )
    return json.loads(out.stdout)["Dir"]


def resolve(schema, components, depth=0):
    """Inlines `$ref`s (and single-element `allOf` wrappers around one)."""
    if depth > 40:
        raise SystemExit("schema too deep (a cycle?)")
    if isinstance(schema, list):
        return [resolve(s, components, depth + 1) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return resolve(components[name], components, depth + 1)
    if "allOf" in schema and len(schema["allOf"]) == 1 and "$ref" in schema["allOf"][0]:
        merged = dict(resolve(schema["allOf"][0], components, depth + 1))
        merged.update({k: v for k, v in schema.items() if k != "allOf"})
        return merged
    return {k: resolve(v, components, depth + 1) for k, v in schema.items()}


def admission_kinds():
    """group/version/Kind -> the resolved schema of its `spec`."""
    spec_dir = os.path.join(
        module_dir(f"k8s.io/kubernetes@{KUBERNETES}"), "api", "openapi-spec", "v3"
    )
    out = {}
    for version in ("v1", "v1beta1", "v1alpha1"):
        path = os.path.join(spec_dir, f"apis__admissionregistration.k8s.io__{version}_openapi.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            components = json.load(f)["components"]["schemas"]
        for kind in ADMISSION_KINDS:
            name = f"io.k8s.api.admissionregistration.{version}.{kind}Spec"
            if name in components:
                out[f"admissionregistration.k8s.io/{version}/{kind}"] = resolve(
                    components[name], components
                )
    return out


def main():
    root = os.path.join(module_dir(f"github.com/kyverno/kyverno@{VERSION}"), "config", "crds")
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
    for key, schema in admission_kinds().items():
        pruned = prune(schema)
        if pruned not in schemas:
            schemas.append(pruned)
        kinds[key] = schemas.index(pruned)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "kyverno.json"), "w") as f:
        json.dump(
            {
                "source": f"github.com/kyverno/kyverno@{VERSION} config/crds; "
                f"k8s.io/kubernetes@{KUBERNETES} api/openapi-spec/v3 (admissionregistration.k8s.io)",
                "kinds": kinds,
                "schemas": schemas,
            },
            f,
            separators=(",", ":"),
            sort_keys=True,
        )
        f.write("\n")


main()
