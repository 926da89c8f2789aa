"""YAML loaded within limits: a document's aliases, nesting depth and expanded size are counted
while it is composed and before any Python value is built, so an alias bomb ("billion laughs")
or thousands of nested brackets are refused in a few kilobytes of memory.

Scanning and parsing (most of the cost) run in libyaml's C parser where PyYAML was built with
it; composition stays in Python, where the limits are counted, so a C composer's recursion never
meets a hostile nesting depth. Without libyaml the pure-Python parser does the same work, about
eight times slower.

Where the caller asks (``corpus.yaml``), a mapping that gives one key twice is refused too:
YAML keeps the last, so a second collection of one name would replace the first unseen."""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from corpus_index.limits import Limits

_MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<`: its keys may be given again beside it


class YamlLimitError(ValueError):
    """A YAML document exceeds a limit; ``line`` is the 0-based line within the text."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


class YamlDuplicateKeyError(ValueError):
    """A mapping of a YAML document gives one key twice; ``line`` is the 0-based line of the
    second."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


class _CountingComposer(Composer):
    """A composer that counts alias uses and nesting depth as it composes."""

    limits: Limits
    aliases: int
    depth: int
    check_event: Any  # the parser's, C or Python
    peek_event: Any

    def compose_node(self, parent: Any, index: Any) -> Any:
        line = self.peek_event().start_mark.line
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > self.limits.max_yaml_aliases:
                raise YamlLimitError(
                    f"more than limits.max_yaml_aliases = {self.limits.max_yaml_aliases} "
                    "alias uses",
                    line,
                )
        self.depth += 1
        try:
            if self.depth > self.limits.max_nesting_depth:
                raise YamlLimitError(
                    f"nested deeper than limits.max_nesting_depth = "
                    f"{self.limits.max_nesting_depth}",
                    line,
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class _PyBoundedLoader(_CountingComposer, yaml.SafeLoader):
    """``yaml.SafeLoader`` (pure Python) with the counting composer."""

    def __init__(self, text: str, limits: Limits) -> None:
        yaml.SafeLoader.__init__(self, text)
        self.limits, self.aliases, self.depth = limits, 0, 0


_Loader: Any = _PyBoundedLoader
if getattr(yaml, "__with_libyaml__", False):
    from yaml._yaml import CParser

    class _CBoundedLoader(_CountingComposer, CParser, SafeConstructor, Resolver):
        """Events from libyaml's C parser, composed by the counting composer (its Python
        ``compose_*`` methods come before the C parser's own in the method order)."""

        def __init__(self, text: str, limits: Limits) -> None:
            CParser.__init__(self, text)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self.limits, self.aliases, self.depth = limits, 0, 0

    _Loader = _CBoundedLoader


def _expanded_size(root: yaml.Node, limits: Limits) -> None:
    """Refuse a composed document whose nodes, every alias expanded, exceed the limits.

    Each distinct node is visited once (its expanded size and depth are remembered), so the
    count costs the composed size, not the expanded one.
    """
    size: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded depth)
    busy: set[int] = set()

    def too_deep(line: int) -> YamlLimitError:
        return YamlLimitError(
            f"nested (aliases included) deeper than limits.max_nesting_depth = "
            f"{limits.max_nesting_depth}",
            line,
        )

    def visit(node: yaml.Node, at: int) -> tuple[int, int]:
        key = id(node)
        if key in size:
            nodes, depth = size[key]
            if at + depth - 1 > limits.max_nesting_depth:
                raise too_deep(node.start_mark.line)
            return nodes, depth
        if at > limits.max_nesting_depth:  # checked going down, so recursion stays shallow
            raise too_deep(node.start_mark.line)
        if key in busy:
            raise YamlLimitError("an alias refers to a node that contains it", node.start_mark.line)
        busy.add(key)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        nodes, depth = 1, 1
        for child in children:
            n, d = visit(child, at + 1)
            nodes, depth = nodes + n, max(depth, d + 1)
            if nodes > limits.max_yaml_nodes:
                raise YamlLimitError(
                    f"expands (aliases included) to more than limits.max_yaml_nodes = "
                    f"{limits.max_yaml_nodes} nodes",
                    node.start_mark.line,
                )
        busy.discard(key)
        size[key] = (nodes, depth)
        return nodes, depth

    visit(root, 1)


def _refuse_duplicate_keys(root: yaml.Node) -> None:
    """Refuse a mapping that gives one key twice, where YAML keeps the last without a word
    (a key given beside a merge key ``<<`` overrides the merged one, as it should)."""
    seen: set[int] = set()
    todo: list[tuple[yaml.Node, str]] = [(root, "")]
    while todo:
        node, where = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            todo += [(item, f"{where}[{i}]") for i, item in enumerate(node.value)]
        elif isinstance(node, yaml.MappingNode):
            lines: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                named = f"{where}.{key.value}" if where else str(key.value)
                if isinstance(key, yaml.ScalarNode) and key.tag != _MERGE_TAG:
                    if (key.tag, key.value) in lines:
                        raise YamlDuplicateKeyError(
                            f"{named}: given twice in one mapping (also on line "
                            f"{lines[key.tag, key.value] + 1}); the second would replace the first",
                            key.start_mark.line,
                        )
                    lines[key.tag, key.value] = key.start_mark.line
                todo.append((value, named))


def load(text: str, limits: Limits, *, unique_keys: bool = False) -> Any:
    """The value of one YAML document (``yaml.safe_load`` semantics), within ``limits``.

    Args:
        unique_keys: refuse a mapping that gives one key twice (YAML keeps the last).

    Raises:
        YamlLimitError: a limit is exceeded (the message names it and its value).
        YamlDuplicateKeyError: ``unique_keys``, and a mapping gives a key twice.
        yaml.YAMLError: the text is not valid YAML.
    """
    loader = _Loader(text, limits)
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            # libyaml refuses more than 1,000 levels while scanning, before the composer sees them
            if "maximum nesting depth" not in str(exc.problem):
                raise
            line = exc.problem_mark.line if exc.problem_mark else 0
            raise YamlLimitError(
                f"nested deeper than limits.max_nesting_depth = {limits.max_nesting_depth}"
                if limits.max_nesting_depth < 1000
                else "nested deeper than the YAML parser's 1,000 levels",
                line,
            ) from None
        if node is None:
            return None
        _expanded_size(node, limits)
        if unique_keys:
            _refuse_duplicate_keys(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()
