"""The guides' code runs: every fenced ```python block of every docs/*.md
page (not docs/api/, whose pages are generated from docstrings) is
executed, so a guide cannot go stale against the library.

One test per page (its id the file name): the page's blocks run in order,
in-process, in one namespace shared by the page's blocks (a fresh one per
page, `__name__ == "__main__"`), with the current directory a fresh
temporary one, so files the snippets write land there. After each page
the global Keras state is reset: the dtype policy (float32), the flash
attention setting (as it was), the distribution (none) and the session
(`keras.backend.clear_session()`); so is `os.environ`. Warnings are errors,
as everywhere in this suite (pyproject.toml): a snippet that warns fails.

Conventions for writers, in the Markdown (invisible on the site):

- A fence whose language is `python` (or `py`) is executed; every other
  fence (bash, kotlin, text, a fence without a language) is not.
- `<!-- docs-test: skip REASON -->` on the line just before a fence skips
  that block. REASON is required (a skip without one fails the page's
  test) and is for what cannot run here only: a TPU, several machines or
  devices, another Keras backend, a checkpoint of the reference's PyTorch
  code. A skipped python block is still compiled, so its syntax is
  checked.
- `<!-- docs-test: setup` ... `-->`, an HTML comment whose body (the lines
  between the opening line and a line holding only `-->`) is Python,
  runs in order with the visible blocks, in the same namespace: for the
  small stand-ins a snippet assumes (`model`, `x_train`, `sample_inputs`:
  a tiny model, tiny arrays), so the visible snippets read naturally, and
  for checks of what a snippet's comments promise (a shape, an error).
- Any other `<!-- docs-test: ... -->` comment (at the start of a line) is
  an error: a typo would otherwise silently run or skip nothing.
- A page's `--8<-- "FILE"` and `--8<-- "FILE:SECTION"` lines
  (pymdownx.snippets, paths from the repository's root) are expanded
  first, so included code runs as part of the page; a failure in it names
  the included file and its line.

A failing block fails its page's test with the page and the line of the
block's first line of code; the traceback points into the Markdown file
at the failing line. A page with no python block, docs-test comment or
snippet include has no test; one whose python blocks are all skipped is
reported as skipped.

Conversions to TFLite need TensorFlow, so the pages' tests are
`tensorflow_only` (skipped under JAX and PyTorch, where CI runs the rest of
the suite) and `slow` (they convert, fit and export).
"""

import dataclasses
import os
import pathlib
import re
import textwrap

import keras
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_COMMENT = re.compile(r"^\s*<!--\s*docs-test:(?P<rest>.*)$")
_SKIP = re.compile(r"^skip\b\s*(?P<reason>.*?)\s*-->\s*$")
_PYTHON = {"python", "py", "python3"}
# pymdownx.snippets, one file (or one section of it) on a line of its own;
# a line that starts with `;` is an escaped one, left as it is.
_SNIPPET = re.compile(
    r"^(?P<indent>[ \t]*)-{1,}8<-{1,}[ \t]+"
    r"(?P<q>[\"'])(?P<target>.+?)(?P=q)\s*$"
)
_SNIPPET_BLOCK = re.compile(r"^[ \t]*-{1,}8<-{1,}\s*$")
_SECTION = re.compile(r"-{1,}8<-{1,}[ \t]+\[(?P<end>start|end):(?P<name>\w+)\]")


@dataclasses.dataclass(frozen=True)
class Line:
    """A line of a page after its snippets are included: its text, the
    file it comes from (as named in messages) and its line there."""

    text: str
    file: str
    lineno: int


@dataclasses.dataclass(frozen=True)
class Block:
    """A piece of a page's code.

    kind: "python" (a visible block to run), "setup" (a hidden one to run)
    or "skip" (a python block only compiled); file and lineno: where its
    first line of code is (the page, or a file the page includes); code:
    its text, dedented; reason: why a skipped block is skipped.
    """

    kind: str
    file: str
    lineno: int
    code: str
    reason: str = ""


class GuideSyntaxError(ValueError):
    """A docs-test comment (or a snippet include) that the conventions do
    not allow."""


def _language(info):
    info = info.strip().lstrip("{").strip()
    word = re.split(r"[\s{}]", info, maxsplit=1)[0] if info else ""
    return word.lstrip(".").lower()


def page_lines(text, name, root=ROOT, depth=0):
    """The Line`s of Markdown `text` (named `name`), with the files that
    its `--8<-- "FILE"` or `--8<-- "FILE:SECTION"` lines include (paths
    relative to `root`, as mkdocs.yml's `base_path`) put in their place,
    as pymdownx.snippets does; section markers are dropped."""
    lines = []
    for number, text_line in enumerate(text.splitlines(), 1):
        if _SNIPPET_BLOCK.match(text_line):
            raise GuideSyntaxError(
                f"{name}:{number}: the block form of snippets is not "
                'supported here: one `--8<-- "FILE"` line per file'
            )
        snippet = _SNIPPET.match(text_line)
        if snippet is None:
            if not _SECTION.search(text_line):
                lines.append(Line(text_line, name, number))
            continue
        if depth > 4:
            raise GuideSyntaxError(f"{name}:{number}: snippets nest too deep")
        target, _, section = snippet.group("target").partition(":")
        path = root / target
        if not path.is_file():
            raise GuideSyntaxError(f"{name}:{number}: no file {target}")
        included = path.read_text(encoding="utf-8").splitlines()
        first, last = 0, len(included)
        if section:
            marks = {
                (m.group("end"), m.group("name")): i
                for i, line in enumerate(included)
                for m in _SECTION.finditer(line)
            }
            if ("start", section) not in marks or ("end", section) not in marks:
                raise GuideSyntaxError(
                    f"{name}:{number}: no section {section!r} in {target}"
                )
            first, last = marks["start", section] + 1, marks["end", section]
        inner = page_lines("\n".join(included), target, root, depth + 1)
        indent = snippet.group("indent")
        lines.extend(
            dataclasses.replace(line, text=indent + line.text)
            for line in inner
            if first < line.lineno <= last
        )
    return lines


def collect_blocks(text, name="<page>", root=ROOT):
    """The blocks of Markdown `text` (a page named `name`, snippets
    included from `root`) to run or compile, in page order.

    Raises GuideSyntaxError (naming the file and the line) for a skip
    without a reason, a skip not followed by a fence, an unclosed setup
    comment, or an unknown docs-test comment. A fence left open runs to
    the end of the page, as CommonMark has it.
    """
    lines = page_lines(text, name, root)
    blocks = []
    skip = None  # the skip comment's reason and Line, awaiting its fence
    i = 0
    while i < len(lines):
        line = lines[i]
        where = f"{line.file}:{line.lineno}"
        fence = _FENCE.match(line.text)
        comment = _COMMENT.match(line.text)
        if skip is not None and not fence:
            raise GuideSyntaxError(
                f"{skip[1].file}:{skip[1].lineno}: `docs-test: skip` must be "
                "on the line just before a fence"
            )
        if comment:
            rest = comment.group("rest").strip()
            skipped = _SKIP.match(rest)
            if skipped:
                if not skipped.group("reason"):
                    raise GuideSyntaxError(
                        f"{where}: `docs-test: skip` needs a reason: "
                        "<!-- docs-test: skip REASON -->"
                    )
                skip = (skipped.group("reason"), line)
                i += 1
                continue
            if rest == "setup":
                end = i + 1
                while end < len(lines) and lines[end].text.strip() != "-->":
                    end += 1
                if end == len(lines):
                    raise GuideSyntaxError(
                        f"{where}: `docs-test: setup` comment is not closed "
                        "by a line holding only -->"
                    )
                body = [line.text for line in lines[i + 1 : end]]
                code = textwrap.dedent("\n".join(body))
                blocks.append(Block("setup", line.file, line.lineno + 1, code))
                i = end + 1
                continue
            raise GuideSyntaxError(
                f"{where}: unknown docs-test comment {line.text.strip()!r}"
                " (known: `skip REASON -->`, `setup` ... `-->`)"
            )
        if fence:
            marker = fence.group("fence")
            closing = re.compile(
                rf"^[ \t]*{re.escape(marker[0])}{{{len(marker)},}}\s*$"
            )
            end = i + 1
            while end < len(lines) and not closing.match(lines[end].text):
                end += 1
            # An unclosed fence runs to the end of the page (CommonMark).
            indent = fence.group("indent")
            body = [
                b.text[len(indent) :] if b.text.startswith(indent) else b.text
                for b in lines[i + 1 : end]
            ]
            code = textwrap.dedent("\n".join(body))
            if _language(fence.group("info")) in _PYTHON:
                kind, reason = ("skip", skip[0]) if skip else ("python", "")
                blocks.append(
                    Block(kind, line.file, line.lineno + 1, code, reason)
                )
            skip = None
            i = end + 1
            continue
        i += 1
    if skip is not None:
        raise GuideSyntaxError(
            f"{skip[1].file}:{skip[1].lineno}: `docs-test: skip` must be on "
            "the line just before a fence"
        )
    return blocks


def _compiled(block, root=ROOT):
    # Padded so that tracebacks give the Markdown file's own line numbers
    # (and, through linecache, show its lines).
    source = "\n" * (block.lineno - 1) + block.code + "\n"
    return compile(source, str(root / block.file), "exec")


def _pages():
    """The docs/*.md pages with a python fence, a docs-test comment or a
    snippet include."""
    wanted = re.compile(
        r"^\s*(?:(?:`{3,}|~{3,})\s*\{?\.?py|<!--\s*docs-test:|-+8<-+\s)",
        re.M,
    )
    return [
        path
        for path in sorted(DOCS.glob("*.md"))
        if wanted.search(path.read_text(encoding="utf-8"))
    ]


@pytest.fixture
def _clean_keras_state():
    environ = dict(os.environ)
    flash = keras.config.is_flash_attention_enabled()
    yield
    os.environ.clear()
    os.environ.update(environ)
    keras.mixed_precision.set_global_policy("float32")
    if flash is None:
        keras.config.enable_flash_attention()  # the default: None, "auto"
    elif not flash:
        keras.config.disable_flash_attention()
    keras.distribution.set_distribution(None)
    keras.backend.clear_session()


def run_blocks(blocks, page, root=ROOT):
    """Runs `blocks` of the page named `page` in one namespace, in order,
    and compiles the skipped ones; returns the namespace. A failure names
    the page and where the block starts."""
    namespace = {"__name__": "__main__"}
    for block in blocks:
        code = _compiled(block, root)
        if block.kind == "skip":
            continue
        what = "setup comment" if block.kind == "setup" else "python block"
        where = f"line {block.lineno}"
        if block.file != page:
            where = f"{block.file}:{block.lineno} (included)"
        try:
            exec(code, namespace)
        except Exception as error:
            raise AssertionError(
                f"{page}: the {what} at {where} failed: "
                f"{type(error).__name__}: {error}"
            ) from error
    return namespace


@pytest.mark.slow
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("path", _pages(), ids=lambda path: path.name)
def test_guide_code_runs(path, tmp_path, monkeypatch, _clean_keras_state):
    page = f"docs/{path.name}"
    blocks = collect_blocks(path.read_text(encoding="utf-8"), page)
    monkeypatch.chdir(tmp_path)
    run_blocks(blocks, page)
    if not any(block.kind == "python" for block in blocks):
        pytest.skip(f"{page}: every python block is marked docs-test: skip")


def test_collect_blocks_in_page_order():
    text = textwrap.dedent(
        """\
        # A page

        <!-- docs-test: skip needs a TPU -->
        ```python
        connect_to_tpu()
        ```

        <!-- docs-test: setup
        model = "tiny"
        -->

        ```bash
        pip install something
        ```

        ```python
        print(model)
        ```

        - In a list:

            ```python title="indented"
            x = 1
            ```

        ```kotlin
        val x = 1
        ```
        """
    )
    assert collect_blocks(text, "page.md") == [
        Block("skip", "page.md", 5, "connect_to_tpu()", "needs a TPU"),
        Block("setup", "page.md", 9, 'model = "tiny"'),
        Block("python", "page.md", 17, "print(model)"),
        Block("python", "page.md", 23, "x = 1"),
    ]


def test_collect_blocks_includes_snippets(tmp_path):
    (tmp_path / "README.md").write_text(
        "# Project\n\n<!-- --8<-- [start:tour] -->\n```python\n"
        "y = x + 1\n```\n<!-- --8<-- [end:tour] -->\n\n```python\nz\n```\n"
    )
    text = '```python\nx = 1\n```\n\n--8<-- "README.md:tour"\n'
    blocks = collect_blocks(text, "docs/page.md", root=tmp_path)
    assert blocks == [
        Block("python", "docs/page.md", 2, "x = 1"),
        Block("python", "README.md", 5, "y = x + 1"),
    ]
    namespace = run_blocks(blocks, "docs/page.md", root=tmp_path)
    assert namespace["y"] == 2
    with pytest.raises(GuideSyntaxError, match="no section 'other'"):
        collect_blocks('--8<-- "README.md:other"\n', "p.md", root=tmp_path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("<!-- docs-test: skip -->\n```python\nx\n```\n", "needs a reason"),
        ("<!-- docs-test: skip why -->\n\n```python\nx\n```\n", "just before"),
        ("<!-- docs-test: setup\nx = 1\n", "not closed"),
        ("<!-- docs-test: skipp why -->\n```python\nx\n```\n", "unknown"),
        ('--8<-- "no/such/file.md"\n', "no file no/such/file.md"),
    ],
)
def test_collect_blocks_refuses_bad_comments(text, message):
    with pytest.raises(GuideSyntaxError, match=f"^docs/page.md:1: .*{message}"):
        collect_blocks(text, "docs/page.md")


def test_an_unclosed_fence_runs_to_the_end():
    text = "```bash\nls\n```\n\n```python\nx = 1\n\ny = 2\n"
    assert collect_blocks(text, "p.md") == [
        Block("python", "p.md", 6, "x = 1\n\ny = 2")
    ]


def test_a_failing_block_names_the_page_and_line(tmp_path):
    text = "# A page\n\n```python\nx = 1\n```\n\n```python\ny = x\n1 / 0\n```\n"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(text)
    blocks = collect_blocks(text, "docs/page.md", root=tmp_path)
    assert [block.lineno for block in blocks] == [4, 8]
    with pytest.raises(AssertionError) as info:
        run_blocks(blocks, "docs/page.md", root=tmp_path)
    message = "docs/page.md: the python block at line 8 failed: Zero"
    assert str(info.value).startswith(message)
    cause = info.value.__cause__
    assert isinstance(cause, ZeroDivisionError)
    frame = cause.__traceback__.tb_next  # the page's file and line
    assert frame.tb_frame.f_code.co_filename == str(tmp_path / "docs/page.md")
    assert frame.tb_lineno == 9


def test_a_skipped_block_is_compiled():
    text = "<!-- docs-test: skip a TPU -->\n```python\nx = (\n```\n"
    with pytest.raises(SyntaxError):
        run_blocks(collect_blocks(text, "page.md"), "page.md")
