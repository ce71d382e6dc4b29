"""openapi/openapi.yaml is a document strict readers take: YAML without a
key defined twice in one mapping (PyYAML's safe_load keeps the last one
silently, so components.headers defined twice once lost UiCsp while real
client generators refused the file), then a valid OpenAPI 3 document with
every $ref resolved (openapi-spec-validator). Runs in `make test`."""

import os

import pytest
import yaml
from openapi_spec_validator import validate

SPEC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "openapi", "openapi.yaml")


class StrictLoader(yaml.SafeLoader):
    """safe_load that refuses a key twice in one mapping."""


def _mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"key {key!r} defined again (first at line {seen[key] + 1})", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_strict(text):
    return yaml.load(text, Loader=StrictLoader)


def test_the_strict_loader_refuses_a_key_defined_twice():
    with pytest.raises(yaml.constructor.ConstructorError, match="'headers' defined again"):
        load_strict("components:\n  headers: {a: 1}\n  params: {}\n  headers: {b: 2}\n")


def test_the_spec_has_no_key_twice_and_is_valid_openapi():
    with open(SPEC) as f:
        spec = load_strict(f.read())
    validate(spec)
    # both headers survive (the second definition once replaced the first)
    assert {"UiCsp", "RetryAfter"} <= set(spec["components"]["headers"])
