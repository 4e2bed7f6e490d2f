"""YAML for files a user hands udr (params, task declarations, `-S` values), read with bounds: aliases that
expand past a number of values ("billion laughs"), recursive aliases and deep nesting are one-line
errors instead of a hang, a memory blow-up or a RecursionError. A key given twice in one mapping is an
error too (plain YAML keeps the last, silently dropping the first: a second `train:` block)."""

from __future__ import annotations

from typing import Any

import yaml

from udr.errors import UdrError, first_line, quoted

MAX_VALUES = 100_000  # scalars, lists and mappings after expanding every alias
MAX_DEPTH = 64  # nesting of lists and mappings


def load_yaml(text: str, what: str) -> Any:
    """`yaml.safe_load(text)` within the bounds above; `what` names the source in errors. A syntax error
    stays a `yaml.YAMLError` for the caller to report with its line."""
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise UdrError(f"{what}: nested too deeply (more than {MAX_DEPTH} levels)") from None
        if node is None:
            return None
        _check_size(node, what)
        try:
            _check_keys(loader, node, what)
            return loader.construct_document(node)  # the checked node: the text is parsed once
        except ValueError as exc:  # an integer past Python's limit of digits, a date of month 13
            raise UdrError(f"{what}: a value YAML cannot read ({first_line(exc, 70)})") from None
    finally:
        loader.dispose()


def _check_size(root: yaml.Node, what: str) -> None:
    """Count the values and levels `root` expands to (each node once: an alias shares its anchor's
    node), without recursion."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            open_.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            if size[key] > MAX_VALUES:
                raise UdrError(f"{what}: YAML aliases expand to more than {MAX_VALUES} values: refused")
            if depth[key] > MAX_DEPTH:
                raise UdrError(f"{what}: nested too deeply (more than {MAX_DEPTH} levels)")
            continue
        if key in size:
            continue
        if key in open_:
            raise UdrError(f"{what}: a YAML alias refers to itself: refused")
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in size)


def _check_keys(loader: yaml.SafeLoader, root: yaml.Node, what: str) -> None:
    """Refuse a key given twice in one mapping, at any depth: ``{what}:LINE: duplicate key 'train'`` (keys
    compared as YAML reads them: `1` and `1.0` are one key; a merge, `<<: *base`, may be overridden)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue  # a merge; a list or mapping as a key is an error of its own when read
                key = loader.construct_object(key_node)
                if key in keys:
                    raise UdrError(f"{what}:{key_node.start_mark.line + 1}: duplicate key {quoted(key)}")
                keys.add(key)
        stack.extend(reversed(_children(node)))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
