"""A page's HTML as a tree to query (the standard library's parser: no browser, no bs4), so
tests assert on elements (a chart's bars, a form's controls, a section's text) rather than on
substrings. The dashboard's templates close their tags, so no repair beyond void elements."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

__all__ = ["Element", "parse"]

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
         "track", "wbr"}


@dataclass
class Element:
    """One tag: its attributes as written (`attrs["href"]`, `"hidden" in attrs`) and what it
    holds, elements and text in document order."""

    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

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

    def iter(self) -> Iterator[Element]:
        """Every element below this one, in document order."""
        for child in self.children:
            if isinstance(child, Element):
                yield child
                yield from child.iter()

    def find_all(self, tag: str | None = None, *, class_: str | None = None,
                 **attrs: str | bool) -> list[Element]:
        """Elements below this one with the tag, class and attributes given (a value of `True`
        asks only that the attribute be there; a name's `_` stands for `-`, so data_job_id means
        data-job-id; `**{"for": ...}` for a name Python reserves)."""
        wanted = {name.replace("_", "-"): value for name, value in attrs.items()}
        return [el for el in self.iter()
                if (tag is None or el.tag == tag)
                and (class_ is None or class_ in el.classes)
                and all((name in el.attrs) if value is True else el.attrs.get(name) == value
                        for name, value in wanted.items())]

    def one(self, tag: str | None = None, *, class_: str | None = None,
            **attrs: str | bool) -> Element:
        """The one element below this one that matches; AssertionError when none or several do."""
        found = self.find_all(tag, class_=class_, **attrs)
        assert len(found) == 1, f"{len(found)} elements match {tag} {class_} {attrs}"
        return found[0]

    def by_id(self, element_id: str) -> Element:
        """The element with this id (one, as ids are unique); to claim there is none, assert
        `not find_all(id=...)`."""
        return self.one(id=element_id)


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self._open = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs})
        self._open[-1].children.append(element)
        if tag not in _VOID:
            self._open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open[-1].children.append(Element(tag, {name: value or "" for name, value in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self._open) - 1, 0, -1):
            if self._open[depth].tag == tag:
                del self._open[depth:]
                return

    def handle_data(self, data: str) -> None:
        self._open[-1].children.append(data)


def parse(html: str) -> Element:
    """The document's root (tag `#document`), holding the page's elements."""
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root
