"""How an item class's fields meet the document stored before (docs/storage.md#recrawl).

An item class names them with class attributes, each a collection of field names:

- ``volatile_fields`` differ on every fetch of the same content (a signed URL): left out of
  the change hash, set each time.
- ``least_fields`` keep the least value ever stored (a page's depth); an item without a value
  (None) leaves the stored one.
- ``kept_fields`` take an item's value, but an item without one (None: the site answered null
  or nothing) leaves the stored one (a video's counts); a new value is a change (unless the
  field is volatile too), which MongoDB tells by comparing the values: they are left out of
  the change hash, which could not say what a document keeps.
- ``union_fields`` hold a list to which each item's elements are added (a video's categories,
  every one it was found under): kept in the order first stored, each once; an element not
  stored yet is no change. An item's value that is no list is one element (None: none).

An item seen twice in one batch is written once, its values of these fields merged
(:meth:`FieldRules.merged`) as the two writes would have left them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from crawler.storage.destinations import field_of

# The class attributes naming an item class's rules, by the rule's name.
ATTRIBUTES = {
    "volatile": "volatile_fields",
    "least": "least_fields",
    "kept": "kept_fields",
    "union": "union_fields",
}


class InvalidFieldRules(TypeError):
    """An item class names a field in two rules that exclude each other, or names them with
    something that is no collection of field names."""


@dataclass(frozen=True)
class FieldRules:
    """The fields of an item class that meet the stored document by a rule of their own."""

    volatile: frozenset[str] = frozenset()
    least: frozenset[str] = frozenset()
    kept: frozenset[str] = frozenset()
    union: frozenset[str] = frozenset()

    @property
    def merged_fields(self) -> frozenset[str]:
        """The fields whose values are read as the item is buffered and merged in a batch."""
        return self.least | self.kept | self.union

    @property
    def unhashed(self) -> frozenset[str]:
        """The fields left out of the change hash."""
        return self.volatile | self.kept | self.union

    def values_of(self, item: Any) -> dict[str, Any]:
        """The item's values of its merged fields (None when it has none), a union field's as
        the list of its elements."""
        values = {name: field_of(item, name) for name in self.merged_fields}
        for name in self.union:
            values[name] = elements(values[name])
        return values

    def merged(self, earlier: Mapping[str, Any], later: Mapping[str, Any]) -> dict[str, Any]:
        """The values of an item seen twice in one batch, as writing ``earlier`` then ``later``
        would leave them: the least, the later unless it is None, both lists' elements."""
        merged = dict(later)
        for name, value in earlier.items():
            if value is None:
                continue
            if name in self.union:
                merged[name] = [*value, *merged.get(name, ())]
            elif merged.get(name) is None or (name in self.least and _less(value, merged[name])):
                merged[name] = value
        return merged


NO_RULES = FieldRules()


@cache
def rules_of(item_class: type) -> FieldRules:
    """The rules an item class names (InvalidFieldRules when they cannot be followed)."""
    named = {rule: _names(item_class, attribute) for rule, attribute in ATTRIBUTES.items()}
    rules = FieldRules(**named)
    for first, second in (("least", "kept"), ("least", "union"), ("kept", "union")):
        if both := sorted(named[first] & named[second]):
            raise InvalidFieldRules(
                f"{item_class.__name__} names {', '.join(both)} in both "
                f"{ATTRIBUTES[first]} and {ATTRIBUTES[second]}: a field follows one of them"
            )
    return rules


def _names(item_class: type, attribute: str) -> frozenset[str]:
    value = getattr(item_class, attribute, ())
    if isinstance(value, str):
        return frozenset({value})
    names = list(value) if isinstance(value, Iterable) else [value]
    if not all(isinstance(name, str) for name in names):
        raise InvalidFieldRules(
            f"{item_class.__name__}.{attribute} must be field names, not {value!r:.80}"
        )
    return frozenset(names)


def elements(value: Any) -> list[Any]:
    """A union field's value as the list of its elements: a list's, a tuple's or a set's own,
    none for None, any other value as one."""
    if value is None:
        return []
    if isinstance(value, list | tuple | set | frozenset):
        return list(value)
    return [value]


def distinct(values: list[Any]) -> list[Any]:
    """``values`` without repeats, in the order first met: equal numbers are one (as MongoDB
    compares them: 1 and 1.0, not True), other values one when of the same type and equal."""
    seen: set[Any] = set()
    kept: list[Any] = []
    for value in values:
        key = _element_key(value)
        if key not in seen:
            seen.add(key)
            kept.append(value)
    return kept


def _element_key(value: Any) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (int, value)
    try:
        hash(value)
    except TypeError:  # a list or a document: by its text (a document's keys in their order)
        return (type(value), repr(value))
    return (type(value), value)


def _less(value: Any, other: Any) -> bool:
    try:
        return bool(value < other)
    except TypeError:
        return False
