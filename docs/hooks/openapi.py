"""MkDocs hook: the REST API reference, rendered from the schema the code produces.

At build time it runs `manage.py spectacular` (no network, no database), publishes the schema
as `openapi.json` beside the pages, and replaces the marker below in a page with one section
per endpoint and one table per schema component. The reference therefore cannot drift from the
API: a view or serializer change shows up in the next `make docs`, and a schema that cannot be
generated fails the build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

MARKER = "<!-- openapi-reference -->"
SCHEMA_FILE = "openapi.json"
METHODS = ("get", "post", "put", "patch", "delete")
#: Longer enums (the schema endpoint's list of languages) are summed up, not listed.
MAX_ENUM = 16

_schema: dict[str, Any] = {}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Generate the schema once per build and publish it as a file of the site."""
    root = Path(config.config_file_path).parent
    # Development settings: writing the schema needs no secret key.
    result = subprocess.run(
        [sys.executable, "manage.py", "spectacular", "--format", "openapi-json"],
        cwd=root, capture_output=True, text=True, check=False,
        env={**os.environ, "DJANGO_DEBUG": "1"},
    )
    if result.returncode != 0:
        raise PluginError(f"manage.py spectacular failed:\n{result.stderr.strip()}")
    _schema.clear()
    _schema.update(json.loads(result.stdout))
    files.append(File.generated(config, SCHEMA_FILE, content=result.stdout))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render(_schema))


def render(schema: dict[str, Any]) -> str:
    """The whole reference: endpoints first, then the shapes they use."""
    lines = [f"Schema version {schema['info']['version']}: {schema['info']['description']}", ""]
    for path, operations in schema["paths"].items():
        for method in METHODS:
            if method in operations:
                lines += _operation(method, path, operations[method])
    lines += ["## Schemas", ""]
    for name, component in schema["components"]["schemas"].items():
        lines += _component(name, component)
    return "\n".join(lines)


def _operation(method: str, path: str, operation: dict[str, Any]) -> list[str]:
    lines = [f"### `{method.upper()} {path}`", ""]
    if operation.get("description"):
        lines += [_cell(operation["description"]), ""]
    auth = "none" if {} in operation.get("security", []) or not operation.get("security") \
        else "a token (`Authorization: Token …`) or a console session"
    lines += [f"Credentials: {auth}.", ""]
    parameters = operation.get("parameters", [])
    if parameters:
        lines += ["| parameter | in | required | type | meaning |", "|---|---|---|---|---|"]
        for parameter in parameters:
            lines.append(
                f"| `{parameter['name']}` | {parameter['in']} | "
                f"{'yes' if parameter.get('required') else 'no'} | "
                f"{_type(parameter.get('schema', {}))} | "
                f"{_description(parameter, parameter.get('schema', {}))} |"
            )
        lines.append("")
    body = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if body:
        lines += [f"Request body: {_type(body['schema'])}.", ""]
    lines += ["| status | meaning | body |", "|---|---|---|"]
    for status, response in sorted(operation.get("responses", {}).items()):
        content = response.get("content", {}).get("application/json")
        shape = _type(content["schema"]) if content else "—"
        meaning = response.get("description") or ("success" if status < "300" else "")
        lines.append(f"| {status} | {_cell(meaning)} | {shape} |")
    return [*lines, ""]


def _component(name: str, component: dict[str, Any]) -> list[str]:
    lines = [f"### {name} {{#schema-{name.lower()}}}", ""]
    if _description(component, component):
        lines += [_description(component, component), ""]
    properties = component.get("properties")
    if not properties:
        return [*lines, f"Type: {_type(component)}.", ""]
    required = set(component.get("required", []))
    lines += ["| field | type | required | meaning |", "|---|---|---|---|"]
    for field, spec in properties.items():
        flags = " (read-only)" if spec.get("readOnly") else ""
        lines.append(
            f"| `{field}` | {_type(spec)}{flags} | {'yes' if field in required else 'no'} | "
            f"{_description(spec, spec)} |"
        )
    return [*lines, ""]


def _type(spec: dict[str, Any]) -> str:
    """A short human reading of a JSON schema, with links to the named components."""
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#schema-{name.lower()})"
    for combiner in ("allOf", "oneOf", "anyOf"):
        if combiner in spec:
            return " or ".join(_type(part) for part in spec[combiner])
    kind = spec.get("type")
    if kind == "array":
        text = f"array of {_type(spec.get('items', {}))}"
    elif kind == "object" and "additionalProperties" in spec:
        extra = spec["additionalProperties"]
        text = f"object of {_type(extra)}" if extra else "object"
    elif "enum" in spec:
        values = [f"`{value}`" for value in spec["enum"] if value is not None]
        text = " \\| ".join(values) if len(values) <= MAX_ENUM else f"one of {len(values)} values"
    else:
        text = kind or "any JSON"
        if spec.get("format"):
            text += f" ({spec['format']})"
    return text + (", nullable" if spec.get("nullable") else "")


def _description(holder: dict[str, Any], spec: dict[str, Any]) -> str:
    """The description plus the limits that the schema states."""
    text = holder.get("description", "")
    if "enum" in spec and text.startswith("* `"):
        text = ""  # drf-spectacular's list of enum values repeats the type column
    limits = [
        f"{label} {spec[key]}"
        for key, label in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "min length"),
                           ("maxLength", "max length"), ("maxItems", "at most items:"))
        if key in spec
    ]
    return _cell("; ".join(part for part in (text, ", ".join(limits)) if part))


def _cell(text: str) -> str:
    """Text made safe for one table cell."""
    return " ".join(text.split()).replace("|", "\\|")
