"""Rewrite the generated tables of docs/methods.md from the registry (run after adding or
changing a method):

    PYTHONPATH=src python scripts/update_docs.py

The softmax methods, the rules of ``auto`` (§5) and the attention methods sit between
``<!-- methods:begin/end -->``, ``<!-- auto:begin/end -->`` and ``<!-- attention:begin/end -->``
markers; everything outside the markers is left as it is. ``flashlesson methods`` prints the
softmax table from the same registry, and tests/test_registry.py fails while docs/methods.md
and the registry disagree.
"""

import re
import sys
from pathlib import Path

METHODS_MD = Path(__file__).resolve().parents[1] / "docs" / "methods.md"


def generated():
    from flashlesson.registry import attention_table, auto_rules_text, softmax_table
    return {"methods": "\n" + softmax_table() + "\n", "auto": auto_rules_text(),
            "attention": "\n" + attention_table() + "\n"}


def render(text, parts):
    for key, body in parts.items():
        pattern = re.compile(rf"(<!-- {key}:begin -->)(.*?)(<!-- {key}:end -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"docs/methods.md has no <!-- {key}:begin/end --> markers")
        text = pattern.sub(lambda m: m.group(1) + body + m.group(3), text)
    return text


def main():
    text = METHODS_MD.read_text(encoding="utf-8")
    new = render(text, generated())
    if new != text:
        METHODS_MD.write_text(new, encoding="utf-8")
        print("docs/methods.md updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
