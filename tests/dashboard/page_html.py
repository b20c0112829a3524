"""A page's HTML as a tree of elements, for tests that check what a browser would find by id,
tag and attribute (the standard library's parser: the dashboard's templates close their tags)."""

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

__all__ = ["Element", "parse_page"]

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
         "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list["Element | str"] = field(default_factory=list)
    parent: "Element | None" = None

    def __getitem__(self, name: str) -> str:
        return self.attrs[name]

    def has(self, name: str) -> bool:
        return name in self.attrs

    @property
    def classes(self) -> list[str]:
        return self.attrs.get("class", "").split()

    @property
    def text(self) -> str:
        """The text inside, with runs of whitespace made one space."""
        return " ".join("".join(self._texts()).split())

    def _texts(self) -> Iterator[str]:
        for child in self.children:
            if isinstance(child, str):
                yield child
            else:
                yield from child._texts()

    def walk(self) -> Iterator["Element"]:
        for child in self.children:
            if isinstance(child, Element):
                yield child
                yield from child.walk()

    def find_all(self, tag: str | None = None, class_: str | None = None,
                 **attrs: str | bool) -> list["Element"]:
        """Elements below this one with the tag, class and attributes given (`True`: present;
        a name's `_` stands for `-`, so data_job_id means data-job-id)."""
        wanted = {name.replace("_", "-"): value for name, value in attrs.items()}
        return [el for el in self.walk()
                if (tag is None or el.tag == tag)
                and (class_ is None or class_ in el.classes)
                and all((name in el.attrs) if value is True else el.attrs.get(name) == value
                        for name, value in wanted.items())]

    def find(self, tag: str | None = None, class_: str | None = None,
             **attrs: str | bool) -> "Element":
        """The one element that matches; AssertionError when none or several do."""
        found = self.find_all(tag, class_, **attrs)
        assert len(found) == 1, f"{len(found)} elements match {tag} {class_} {attrs}"
        return found[0]

    def by_id(self, element_id: str) -> "Element":
        return self.find(id=element_id)

    def ancestors(self) -> Iterator["Element"]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self._open = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs}, parent=self._open[-1])
        self._open[-1].children.append(element)
        if tag not in _VOID:
            self._open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open[-1].children.append(
            Element(tag, {name: value or "" for name, value in attrs}, parent=self._open[-1]))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self._open) - 1, 0, -1):
            if self._open[depth].tag == tag:
                del self._open[depth:]
                return

    def handle_data(self, data: str) -> None:
        self._open[-1].children.append(data)


def parse_page(html: str) -> Element:
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root
