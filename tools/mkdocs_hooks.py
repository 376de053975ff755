"""mkdocs hooks (mkdocs.yml `hooks:`): add the generated reference pages and two repository pages outside docs/
to the site, and keep links valid.

The command-line and Python API references are rendered from the code at every build (tools/gen_reference.py:
the parser, the config dataclasses, `specdec.__all__`), so the project must be importable where mkdocs runs
(`nox -s docs` installs it).

The documentation is written to read correctly in the repository (GitHub renders every .md where it lies), so
its links are repository paths: docs/CONTEXTS.md links `../CHANGELOG.md`, results/README.md links
`invariance/README.md`. The site holds docs/ plus the pages of SITE_PAGES. Each relative link is resolved
against its page's place in the repository and then
- pointed at the site page, where the target is one (docs/X.md, or a page of SITE_PAGES);
- otherwise written as the target's repository path in code (`results/invariance/README.md`): the file is in
  the repository, not in the site. Nothing is dropped silently, and `mkdocs build --strict` still fails on a
  link to a docs page that does not exist.
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
SITE_PAGES = {"CHANGELOG.md": "changelog.md", "results/README.md": "results.md"}  # repository path -> site path
LINK = re.compile(r"(?<!!)\[([^\]\n]+)\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def on_files(files, config):
    if str(ROOT) not in sys.path:  # the checkout's code is what the references document (mkdocs resets sys.path
        sys.path.insert(0, str(ROOT))  # after loading a hook, so this is done here)
    from tools.gen_reference import PAGES

    for repo_path, site_path in SITE_PAGES.items():
        files.append(File.generated(config, site_path, abs_src_path=str(ROOT / repo_path)))
    for site_path, render in PAGES.items():
        files.append(File.generated(config, site_path, content=render()))
    return files


def _repo_path(page) -> str:
    """Where the page's source lies in the repository."""
    by_site = {site: repo for repo, site in SITE_PAGES.items()}
    return by_site.get(page.file.src_uri, f"docs/{page.file.src_uri}")


def _rewrite(match: re.Match, page_repo: str, page_site: str) -> str:
    text, target = match.group(1), match.group(2)
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return match.group(0)  # a URL, an anchor, a site-absolute path
    path, _, anchor = target.partition("#")
    repo_target = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo), path))
    if repo_target.startswith("docs/"):  # a docs page, or a generated one (docs/reference/...)
        site_target = repo_target.removeprefix("docs/")
    elif repo_target in SITE_PAGES:
        site_target = SITE_PAGES[repo_target]
    else:
        return f"{text} (`{repo_target}`)"
    relative = posixpath.relpath(site_target, posixpath.dirname(page_site) or ".")
    return f"[{text}]({relative}{'#' + anchor if anchor else ''})"


def on_page_markdown(markdown, page, config, files):
    page_repo, page_site = _repo_path(page), page.file.src_uri
    pieces, last = [], 0
    for fence in FENCE.finditer(markdown):  # links inside code blocks are code, left alone
        pieces.append(LINK.sub(lambda m: _rewrite(m, page_repo, page_site), markdown[last:fence.start()]))
        pieces.append(fence.group(0))
        last = fence.end()
    pieces.append(LINK.sub(lambda m: _rewrite(m, page_repo, page_site), markdown[last:]))
    return "".join(pieces)
