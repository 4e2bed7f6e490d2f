"""The one-line error helpers of udr.errors."""

from collections import OrderedDict

from udr.errors import is_collection


def test_is_collection_takes_lists_and_iterators_not_text_or_mappings():
    for items in ([], ["a"], ("a", "b"), {"a"}, iter(["a"]), (x for x in "ab"), range(3)):
        assert is_collection(items), items
    for not_items in ("ab", b"ab", {"a": 1}, OrderedDict(a=1), 3, None, 2.5):
        assert not is_collection(not_items), not_items
    assert not is_collection({"a"}, set) and not is_collection(("a", "b"), tuple)
