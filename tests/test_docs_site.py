"""The docs site builds in strict mode (mkdocs.yml), works offline from its folder, and a broken link fails it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's notice about its successor
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_site_builds_strict_and_loads_nothing_from_the_network(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = build(ROOT / "mkdocs.yml", site)
    assert done.returncode == 0, done.stderr[-3000:]
    pages = list(site.rglob("*.html"))
    assert len(pages) > 30 and (site / "index.html").exists() and (site / "reference" / "knobs.html").exists()
    for page in pages:
        text = page.read_text()
        # no script, stylesheet or font from elsewhere: the folder is the site (links to other sites may stay)
        assert not re.search(r'<(script|link)[^>]*(src|href)="(https?:)?//', text), page
        # every link between pages names its .html file, so it opens from the file system
        assert not re.search(r'href="(?!https?:|#|mailto:)[^"]*/"', text), page
    assert (site / "search" / "search_index.js").read_text().startswith("var __index = ")  # search offline


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[there](other.md#no-such-heading) and [gone](missing.md)\n")
    (docs / "other.md").write_text("# Other\n\n## A heading\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {docs}\nnav: [index.md, other.md]\n"
                      "extra: {polyfills: []}\n")
    done = build(config, tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-heading" in done.stderr and "missing.md" in done.stderr, done.stderr[-3000:]
