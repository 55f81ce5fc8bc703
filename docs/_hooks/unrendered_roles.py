"""mkdocs hook: the build fails on a reStructuredText role left in a rendered page (``:class:`x```),
which mkdocstrings' Google-style docstrings do not render; docstrings use Markdown code spans."""
import re

from mkdocs.exceptions import PluginError

ROLE = re.compile(r":(?:py:)?(?:class|func|mod|meth|attr|data|exc|obj|const|ref|doc):(?:`|&#x60;|<code>)")


def on_page_content(html, page, config, files):
    found = ROLE.search(html)
    if found:
        start = max(0, found.start() - 60)
        raise PluginError(f"{page.file.src_path}: an unrendered reStructuredText role: "
                          f"...{html[start:found.end() + 40]}...; write a Markdown code span instead")
    return html
