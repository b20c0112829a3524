"""A page's HTML as a tree to query (the standard library's parser: no browser, no bs4), so
tests assert on elements (a chart's bars, a section's text) rather than on substrings."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

__all__ = ["Element", "parse"]

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
         "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        """The text inside, whitespace collapsed."""
        parts = [c if isinstance(c, str) else c.text() for c in self.children]
        return " ".join("".join(parts).split())

    def iter(self) -> Iterator[Element]:
        for child in self.children:
            if isinstance(child, Element):
                yield child
                yield from child.iter()

    def find_all(self, tag: str | None = None, *, cls: str | None = None,
                 **attrs: str) -> list[Element]:
        """Descendants with `tag`, class `cls` and these attribute values (`data_chart=` for
        data-chart, `id=`)."""
        wanted = {name.replace("_", "-"): value for name, value in attrs.items()}
        return [e for e in self.iter()
                if (tag is None or e.tag == tag) and (cls is None or cls in e.classes)
                and all(e.attrs.get(name) == value for name, value in wanted.items())]

    def one(self, tag: str | None = None, *, cls: str | None = None, **attrs: str) -> Element:
        found = self.find_all(tag, cls=cls, **attrs)
        assert len(found) == 1, f"expected one {tag} {cls} {attrs}, found {len(found)}"
        return found[0]

    def by_id(self, element_id: str) -> Element | None:
        found = self.find_all(id=element_id)
        return found[0] if found else None


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs})
        self.stack[-1].children.append(element)
        if tag not in _VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, {name: value or "" for name, value in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> Element:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root
