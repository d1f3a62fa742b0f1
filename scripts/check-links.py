#!/usr/bin/env python3
"""Checks the links of the book and the README (make docs runs it; standard library only).

    python3 scripts/check-links.py [--root DIR]                 # the Markdown sources
    python3 scripts/check-links.py [--root DIR] --html OUT      # and the rendered book in OUT

Sources: every relative link and image of docs/src/**/*.md and README.md must name a file
that exists, and every #anchor a heading of the page it points at, with the heading's id as
mdBook makes it (lowercase; whitespace to '-'; characters other than letters, digits, '_'
and '-' removed; a repeated id gets -1, -2, ...; `{#id}` sets one). Links of the book stay
inside docs/src (the book is published without the rest of the repository). Every page of
docs/src is reachable from SUMMARY.md, and every page SUMMARY.md lists exists.

Rendered book (--html): every relative href and src inside each page's <main> names a file of
the output, and its #anchor an id there.

Exits 1 listing every broken link, 0 when there is none. External links (with a scheme such
as https:) are not fetched.
"""

import argparse
import html
import html.parser
import os
import re
import sys
import urllib.parse

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
ATTRS = re.compile(r"\s*\{([^}]*)\}\s*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
# [text](target "title") and ![alt](target); the target may be in <...>.
INLINE_LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(<[^>]*>|\S+)")
HTML_ATTR = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def heading_id(text):
    """The id mdBook 0.5 gives a heading with this (rendered) text."""
    out = []
    for ch in text.strip().lower():
        if ch.isalnum() or ch in "_-":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def rendered_text(markdown):
    """The text a heading's Markdown renders to: code spans verbatim, link and image text
    without their targets, emphasis markers and HTML tags dropped, entities decoded."""
    spans = []

    def keep(m):
        spans.append(m.group(2).strip() if m.group(2).strip() else m.group(2))
        return "\x00%d\x00" % (len(spans) - 1)

    text = CODE_SPAN.sub(keep, markdown)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("*", "")
    text = re.sub(r"(?<![0-9A-Za-z])_+|_+(?![0-9A-Za-z])", "", text)
    text = re.sub(r"\\(.)", r"\1", text)
    text = html.unescape(text)
    return re.sub(r"\x00(\d+)\x00", lambda m: spans[int(m.group(1))], text)


def prose_lines(lines):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                continue
            yield number, line
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and line.strip() == m.group(1):
            fence = None


def headings(path):
    """The anchors of a Markdown page, in order, as mdBook makes them unique."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    ids, used = [], set()
    previous = ""
    for _, line in prose_lines(lines):
        text = None
        m = ATX.match(line)
        if m:
            text = m.group(2) or ""
        elif SETEXT.match(line) and previous.strip() and not re.match(
                r"^\s*([-*+]\s|\d+[.)]\s|\||>)", previous) and not previous.strip().startswith("|"):
            text = previous.strip()
        previous = line
        if text is None:
            continue
        explicit = None
        a = ATTRS.search(text)
        if a:
            for attr in a.group(1).split():
                if attr.startswith("#"):
                    explicit = attr[1:]
            text = text[: a.start()]
        hid = explicit or heading_id(rendered_text(text))
        if explicit is None and hid in used:
            n = 1
            while f"{hid}-{n}" in used:
                n += 1
            hid = f"{hid}-{n}"
        used.add(hid)
        ids.append(hid)
    return ids


def links(path):
    """(line number, target) of every link and image of a Markdown page, outside code."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found = []
    for number, line in prose_lines(lines):
        prose = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
        for m in INLINE_LINK.finditer(prose):
            found.append((number, m.group(3).strip("<>")))
        m = REF_DEF.match(prose)
        if m:
            found.append((number, m.group(2).strip("<>")))
        for m in HTML_ATTR.finditer(prose):
            found.append((number, m.group(1)))
    return found


def check_sources(root):
    errors = []
    src = os.path.join(root, "docs", "src")
    pages = []
    for directory, _, files in os.walk(src):
        pages += [os.path.join(directory, f) for f in files if f.endswith(".md")]
    pages.sort()
    readme = os.path.join(root, "README.md")
    anchors = {}

    def ids_of(path):
        if path not in anchors:
            anchors[path] = set(headings(path))
        return anchors[path]

    def rel(path):
        return os.path.relpath(path, root)

    for page in pages + [readme]:
        in_book = page != readme
        for number, target in links(page):
            where = f"{rel(page)}:{number}: {target}"
            if not target or SCHEME.match(target):
                continue
            path_part, _, anchor = target.partition("#")
            path_part = urllib.parse.unquote(path_part)
            if path_part.startswith("/"):
                errors.append(f"{where}: an absolute path (use a relative one)")
                continue
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path_part)) \
                if path_part else page
            if in_book and os.path.commonpath([dest, src]) != src:
                errors.append(f"{where}: leaves docs/src (the book is published without the "
                              "rest of the repository)")
                continue
            if not os.path.exists(dest):
                errors.append(f"{where}: no such file {rel(dest)}")
                continue
            if anchor:
                if not dest.endswith(".md"):
                    errors.append(f"{where}: an anchor into {rel(dest)}, which has no headings")
                elif anchor not in ids_of(dest):
                    errors.append(f"{where}: {rel(dest)} has no heading with the id {anchor!r}")

    summary = os.path.join(src, "SUMMARY.md")
    if not os.path.exists(summary):
        errors.append("docs/src/SUMMARY.md is missing")
        return errors
    listed = set()
    for _, target in links(summary):
        if SCHEME.match(target) or not target.partition("#")[0]:
            continue
        listed.add(os.path.normpath(os.path.join(src, urllib.parse.unquote(target.partition("#")[0]))))
    for page in pages:
        if page != summary and page not in listed:
            errors.append(f"{rel(page)}: not reachable from docs/src/SUMMARY.md")
    return errors


class Page(html.parser.HTMLParser):
    """The ids of a rendered page, and the href/src of the elements inside its <main>."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.targets, self.depth = set(), [], 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "main":
            self.depth += 1
        elif self.depth:
            for name in ("href", "src"):
                if attrs.get(name):
                    self.targets.append(attrs[name])

    def handle_endtag(self, tag):
        if tag == "main" and self.depth:
            self.depth -= 1


def check_html(out):
    errors = []
    parsed = {}

    def parse(path):
        if path not in parsed:
            page = Page()
            with open(path, encoding="utf-8") as f:
                page.feed(f.read())
            parsed[path] = page
        return parsed[path]

    for directory, _, files in os.walk(out):
        for name in sorted(files):
            if not name.endswith(".html") or name in ("404.html", "print.html", "toc.html"):
                continue
            path = os.path.join(directory, name)
            for target in parse(path).targets:
                if SCHEME.match(target) or target.startswith("//"):
                    continue
                path_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(directory, urllib.parse.unquote(path_part))) \
                    if path_part else path
                where = f"{os.path.relpath(path, out)}: {target}"
                if os.path.isdir(dest):
                    dest = os.path.join(dest, "index.html")
                if not os.path.isfile(dest):
                    errors.append(f"{where}: not in the rendered book")
                elif os.path.getsize(dest) == 0:
                    errors.append(f"{where}: an empty file")
                elif anchor and dest.endswith(".html") and anchor not in parse(dest).ids:
                    errors.append(f"{where}: no id {anchor!r} there")
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--html", help="the rendered book's directory, to check it too")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    errors = check_sources(root)
    if args.html:
        errors += check_html(os.path.abspath(args.html))
    for e in errors:
        print(f"broken link: {e}", file=sys.stderr)
    if errors:
        print(f"check-links: {len(errors)} broken", file=sys.stderr)
        return 1
    print("check-links: every link resolves", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
