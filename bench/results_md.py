"""bench/RESULTS.md sections: each benchmark script owns the text between its
`<!-- bench:NAME:begin -->` / `<!-- bench:NAME:end -->` markers and replaces it."""
import os
import sys

HEADER = ("# Kiln benchmark results\n\n"
          "Sections between `<!-- bench:NAME:begin -->` / `<!-- bench:NAME:end -->` markers are\n"
          "generated and owned by the benchmark scripts that write them; edit outside them.\n")


def write_section(path, section, begin, end):
    """Replaces the section between `begin` and `end` in `path` (appends it if absent),
    writing to a temporary name first."""
    text = open(path).read() if os.path.exists(path) else HEADER
    b, e = text.find(begin), text.find(end)
    if b != -1 and e != -1 and e > b:
        text = text[:b] + section.rstrip("\n") + text[e + len(end):]
    else:
        if b != -1 or e != -1:
            print(f"warning: unbalanced {begin} / {end} markers in {path}; appending a new section",
                  file=sys.stderr, flush=True)
        text = text.rstrip("\n") + "\n\n" + section
    if not text.endswith("\n"):
        text += "\n"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
